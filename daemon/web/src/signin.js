// The sign-in page: return to the page that sent the browser here (the form posts to this same address, so a
// wrong token keeps it), and say when the token was wrong.
const next = new URLSearchParams(location.search).get("next");
if (next && next.startsWith("/") && !next.startsWith("//")) document.getElementById("next").value = next;
document.getElementById("signin").action = "/signin" + location.search;
if (document.body.dataset.failed === "1") document.getElementById("signin-failed").hidden = false;
