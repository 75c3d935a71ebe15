// The dashboard's router: one document, the page chosen by the path (the daemon serves index.html for each).
import { comparePage } from "./compare_page.js";
import { el } from "./format.js";
import { jobPage } from "./job_page.js";
import { jobsPage } from "./jobs_page.js";
import { submissionsPage } from "./submissions_page.js";
import { trialPage } from "./trial_page.js";

async function route() {
  const main = document.getElementById("main");
  const path = location.pathname;
  const params = new URLSearchParams(location.search);
  let m;
  try {
    if ((m = path.match(/^\/jobs\/([^/]+)\/trials\/(\d+)$/))) await trialPage(main, decodeURIComponent(m[1]), m[2]);
    else if ((m = path.match(/^\/jobs\/([^/]+)$/))) await jobPage(main, decodeURIComponent(m[1]));
    else if (path === "/compare") await comparePage(main, params);
    else if (path === "/submissions") await submissionsPage(main, params);
    else await jobsPage(main);
    document.body.dataset.ready = "1";
  } catch (e) {
    main.replaceChildren(el("p", { class: "error", id: "page-error" }, e.message));
    document.body.dataset.ready = "error";
  }
}

window.addEventListener("popstate", route);
route();
