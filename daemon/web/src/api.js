// The daemon's JSON API (daemon/http_api.h): every answer is a tuner.proto message in protobuf's JSON mapping,
// so int64 fields arrive as strings.
export async function get(path) {
  const res = await fetch(path, { cache: "no-store" });
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${res.status}`);
  return body;
}

// Every page of a list call, in the API's largest page size; onPage(trials so far, total) after each but the last.
export async function allTrials(jobId, query = "", onPage = null) {
  let trials = [], token = "";
  for (;;) {
    // Page tokens are offsets, so a small first page (drawn at once) can be followed by large ones.
    const size = onPage && trials.length === 0 ? 200 : 1000;
    const page = await get(`/api/jobs/${encodeURIComponent(jobId)}/trials?page_size=${size}&page_token=${encodeURIComponent(token)}${query}`);
    trials = trials.concat(page.trials);
    if (onPage && page.next_page_token) onPage(trials, page.total);
    token = page.next_page_token;
    if (!token) return trials;
  }
}

export async function allJobs() {
  let jobs = [], token = "";
  for (;;) {
    const page = await get(`/api/jobs?page_size=1000&page_token=${encodeURIComponent(token)}`);
    jobs = jobs.concat(page.jobs);
    token = page.next_page_token;
    if (!token) return jobs;
  }
}

// Every recorded submission (all pages) with the budget fields of the last page.
export async function allSubmissions() {
  let subs = [], token = "";
  for (;;) {
    const page = await get(`/api/submissions?page_size=1000&page_token=${encodeURIComponent(token)}`);
    subs = subs.concat(page.submissions);
    token = page.next_page_token;
    if (!token) return { ...page, submissions: subs };
  }
}

// The job's watch stream (server-sent events): onEvent gets each pb::JobEvent. Returns a function that stops it.
export function watch(jobId, onEvent) {
  const live = document.getElementById("live");
  const src = new EventSource(`/api/jobs/${encodeURIComponent(jobId)}/events`);
  src.onopen = () => { live.textContent = "live"; };
  src.onmessage = (m) => {
    const e = JSON.parse(m.data);
    live.textContent = `live · ${e.kind.toLowerCase().replace("_", " ")} ${new Date(Number(e.unix_ms)).toLocaleTimeString()}`;
    onEvent(e);
    if (e.kind === "JOB_FINISHED") { src.close(); live.textContent = "job finished"; }
  };
  src.onerror = () => { if (src.readyState === EventSource.CLOSED) live.textContent = ""; };
  return () => src.close();
}
