// The daemon's JSON API (daemon/http_api.h): every answer is a tuner.proto message in protobuf's JSON mapping,
// so int64 fields arrive as strings.
export async function get(path) {
  const res = await fetch(path, { cache: "no-store" });
  // A daemon that requires its token answers 401 once the session has expired: sign in again, then come back.
  if (res.status === 401) {
    location.assign(`/signin?next=${encodeURIComponent(location.pathname + location.search)}`);
  }
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${res.status}`);
  return body;
}

const trialsPath = (jobId, size, token) =>
  `/api/jobs/${encodeURIComponent(jobId)}/trials?page_size=${size}&page_token=${encodeURIComponent(token)}`;

// The trials from page token `from` up to offset `to` (page tokens are offsets): pages of the API's largest
// size, one after the other; a page the daemon cut short (it bounds a page's bytes too) is followed on.
async function trialRange(jobId, from, to) {
  let trials = [], token = String(from);
  while (token && Number(token) < to) {
    const page = await get(trialsPath(jobId, Math.min(1000, to - Number(token)), token));
    trials = trials.concat(page.trials);
    token = page.next_page_token;
  }
  return trials;
}

// Every trial of the job. The first page is small, and onFirst(trials, total) gets it at once (the page draws
// it; the rest is asked for once the promise it returns settles, so the first drawing does not share the
// browser with the rest's parsing); the rest comes as ranges of 2000 trials fetched three at a time (the
// daemon serves requests in parallel), onProgress(loaded, total) after each.
export async function allTrials(jobId, onFirst = null, onProgress = null) {
  const first = await get(trialsPath(jobId, onFirst ? 200 : 1000, ""));
  if (onFirst) await onFirst(first.trials, first.total);
  if (!first.next_page_token) return first.trials;
  const start = Number(first.next_page_token), total = first.total, span = 2000;
  const ranges = [];
  for (let from = start; from < total; from += span) ranges.push([from, Math.min(total, from + span)]);
  const parts = new Array(ranges.length);
  let next = 0, loaded = first.trials.length;
  const worker = async () => {
    while (next < ranges.length) {
      const i = next++;
      parts[i] = await trialRange(jobId, ...ranges[i]);
      loaded += parts[i].length;
      if (onProgress) onProgress(loaded, total);
    }
  };
  await Promise.all([worker(), worker(), worker()]);
  // A trial that started while the pages were read can make the last range end later than the total said.
  const trials = first.trials.concat(...parts);
  const seen = new Set();
  return trials.filter((t) => !seen.has(t.number) && seen.add(t.number));
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
