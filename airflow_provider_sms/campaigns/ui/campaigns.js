// The campaigns page, shown by Airflow's UI in a frame (nav entry "SMS campaigns", and a tab on the
// DAG-run page). It reads the campaigns JSON API with the UI's own login and draws the list and a
// campaign; every figure comes from the API, every text is set as text (never as HTML).
"use strict";

const API = "../api/v1";
const PARIS = new Intl.DateTimeFormat("en-GB", {
  timeZone: "Europe/Paris", year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit",
});
const NUMBER = new Intl.NumberFormat("en-GB");
const app = document.getElementById("app");
// Airflow's root path: this page is served at <root>/sms/campaigns/ui/.
const ROOT = location.pathname.replace(/\/sms\/campaigns\/ui\/.*$/, "");

// ---- the host's theme: Airflow puts "dark" or "light" on its <html>.
function followTheme() {
  let host = null;
  try { host = window.parent !== window ? window.parent.document.documentElement : null; } catch (e) { host = null; }
  const apply = () => {
    const stored = localStorage.getItem("theme");
    const dark = host ? host.classList.contains("dark")
      : stored === "dark" || (stored !== "light" && matchMedia("(prefers-color-scheme: dark)").matches);
    document.documentElement.classList.toggle("dark", dark);
  };
  apply();
  if (host) new MutationObserver(apply).observe(host, { attributes: true, attributeFilter: ["class"] });
}

// ---- building DOM: h("a", {href: ...}, "text", child, ...)
function h(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// ---- the API, with the UI's login: its cookie (Airflow 3.1.1+), else the token the UI keeps (3.0, 3.1.0).
class NotLoggedIn extends Error {}
// Each route() starts a view; an answer that arrives once another view began is dropped, or a slow list
// would draw itself over the campaign opened after it.
let view = 0;
class Superseded extends Error {}

async function api(path, params) {
  const mine = view;
  const url = new URL(`${API}${path}`, location.href);
  for (const [name, value] of Object.entries(params || {})) if (value) url.searchParams.set(name, value);
  let answer = await fetch(url, { credentials: "same-origin" });
  const token = localStorage.getItem("token");
  if (answer.status === 401 && token) {
    answer = await fetch(url, { credentials: "same-origin", headers: { Authorization: `Bearer ${token}` } });
  }
  if (answer.status === 401) throw new NotLoggedIn();
  if (!answer.ok) {
    let detail = answer.statusText;
    try { detail = JSON.stringify((await answer.json()).detail); } catch (e) { /* not JSON */ }
    throw new Error(`HTTP ${answer.status}: ${detail}`);
  }
  const body = await ((answer.headers.get("content-type") || "").includes("json") ? answer.json() : answer.text());
  if (mine !== view) throw new Superseded();
  return body;
}

// ---- links to Airflow's own pages: navigate Airflow's UI (the frame may not navigate the top window).
function airflowLink(path, text) {
  const href = `${ROOT}${path}`;
  return h("a", {
    href,
    onclick: (event) => {
      try {
        const top = window.top;
        if (top === window || top.location.origin !== location.origin) return;
        event.preventDefault();
        top.history.pushState({}, "", href);
        top.dispatchEvent(new PopStateEvent("popstate", { state: {} }));
      } catch (e) { /* a host we cannot reach: follow the link in the frame */ }
    },
  }, text);
}

function quote(value) { return encodeURIComponent(value); }
function runPath(c) { return `/dags/${quote(c.dag_id)}/runs/${quote(c.run_id)}`; }
function taskPath(c) {
  return `${runPath(c)}/tasks/${quote(c.task_id)}${c.map_index >= 0 ? `/mapped/${c.map_index}` : ""}`;
}

function when(iso) {
  const date = new Date(iso);
  return h("time", { datetime: date.toISOString(), title: `${date.toISOString().replace(".000Z", "Z")} (UTC)` },
    PARIS.format(date));
}

// Why a campaign shows no delivery: the account's one webhook posts to another connection's receiver.
const NOT_RECEIVED = "Its connection names no dlr_webhook_id: the service posts an account's reports to "
  + "its one webhook, so they count for the connection whose receiver that webhook calls. Send through "
  + "that connection, or point the webhook here.";

function bar(delivery) {
  if (delivery.reports_received === false) {
    return h("small", { class: "muted", title: NOT_RECEIVED }, "no delivery reports received for this connection");
  }
  if (delivery.reports_pruned_at) {
    return h("small", { class: "muted", title: `deleted ${delivery.reports_pruned_at}` }, "reports deleted (retention): delivery unknown");
  }
  const part = (count) => (delivery.sent ? (100 * count) / delivery.sent : 0).toFixed(2);
  const title = `${NUMBER.format(delivery.delivered)} delivered, ${NUMBER.format(delivery.failed)} failed, `
    + `${NUMBER.format(delivery.not_final)} not yet final, of ${NUMBER.format(delivery.sent)} sent`;
  return h("div", { class: "delivery", title },
    h("div", { class: "bar", role: "img", "aria-label": title },
      h("span", { class: "delivered", "data-share": part(delivery.delivered) }),
      h("span", { class: "failed", "data-share": part(delivery.failed) })),
    h("small", { class: "muted" }, `${(100 * delivery.delivered_share).toFixed(1)} % delivered`));
}

// Widths are set from data attributes after building (no inline style attribute in the markup).
function sizeBars(root) {
  for (const span of root.querySelectorAll(".bar span")) span.style.width = `${span.dataset.share}%`;
}

function filteredText(c) {
  const reasons = Object.entries(c.filtered).map(([reason, count]) => `${reason} ${count}`).join(", ");
  return h("span", { title: reasons || "none filtered" }, NUMBER.format(Object.values(c.filtered).reduce((a, b) => a + b, 0)));
}

function scheduled(c) {
  const moved = c.send_window
    ? h("div", { class: "warn", title: c.send_window.reason }, `moved from ${c.send_window.requested}`)
    : null;
  return [when(c.delivery_at), moved];
}

function legend(pending) {
  return h("span", { class: "legend muted" }, h("i", { class: "delivered" }), "delivered", h("i", { class: "failed" }), "failed",
    pending ? [h("i", { class: "pending" }), "not yet final"] : null);
}

const OUTCOMES = { sent: null, partly_sent: "partly sent", maybe_sent: "may have been sent" };
// The list's delivery filter (the API's values).
const DELIVERY_STATES = { not_final: "Not yet final", complete: "Complete", with_failures: "With failures" };

// ---- the list
// A run id from the address: a "+" typed or left unencoded there reads as a space (run ids have none).
function runId(query) { return (query.get("run_id") || "").replaceAll(" ", "+"); }

async function showList(query) {
  const filters = {
    // Airflow 3.1 puts the run id in the tab's address unencoded: its "+" reads as a space.
    conn_id: query.get("conn_id"), dag_id: query.get("dag_id"), run_id: runId(query),
    task_id: query.get("task_id"), map_index: query.get("map_index"),
    since: query.get("since"), until: query.get("until"), delivery: query.get("delivery"), before: query.get("before"),
  };
  const page = await api("/campaigns", filters);
  const go = (changes) => {
    const next = new URLSearchParams(query);
    for (const [name, value] of Object.entries(changes)) value ? next.set(name, value) : next.delete(name);
    location.hash = `#/?${next}`;
  };
  const field = (name, label, type) => h("label", {}, label,
    h("input", { name, type: type || "text", value: type === "date" ? (query.get(name) || "").slice(0, 10) : query.get(name) || "" }));
  const deliveryField = h("label", {}, "Delivery", h("select", { name: "delivery" },
    h("option", { value: "" }, "Any"),
    Object.entries(DELIVERY_STATES).map(([value, label]) => h("option", { value, selected: filters.delivery === value }, label))));
  const form = h("form", {
    class: "filters",
    onsubmit: (event) => {
      event.preventDefault();
      const data = new FormData(event.target);
      // Whole days, in the browser's time zone: "To" includes its day.
      const day = (value, days) => (value ? new Date(new Date(`${value}T00:00:00`).getTime() + days * 86400000).toISOString() : null);
      go({
        conn_id: data.get("conn_id"), dag_id: data.get("dag_id"), since: day(data.get("since"), 0), until: day(data.get("until"), 1),
        delivery: data.get("delivery"), before: null,
      });
    },
  }, field("conn_id", "Connection"), field("dag_id", "DAG"), field("since", "From", "date"), field("until", "To", "date"), deliveryField,
  h("button", { type: "submit" }, "Filter"),
  h("button", { type: "button", onclick: () => { location.hash = "#/"; } }, "Clear"));
  const rows = page.campaigns.map((c) => h("tr", { class: "campaign", "data-id": c.id },
    h("td", {}, h("a", { href: `#/campaign/${c.id}` }, when(c.sent_at))),
    h("td", {}, airflowLink(`/dags/${quote(c.dag_id)}`, c.dag_id), " / ", airflowLink(runPath(c), c.run_id), " / ",
      airflowLink(taskPath(c), c.task_id + (c.map_index >= 0 ? `[${c.map_index}]` : ""))),
    h("td", {}, c.tickets.join(", ") || "—", OUTCOMES[c.outcome] ? h("div", { class: "warn" }, OUTCOMES[c.outcome]) : null),
    h("td", {}, c.pushtype || "—"),
    h("td", {}, scheduled(c)),
    h("td", { class: "number" }, NUMBER.format(c.sent)),
    h("td", { class: "number" }, filteredText(c)),
    h("td", { class: "number" }, NUMBER.format(c.cost)),
    h("td", {}, bar(c.delivery))));
  const table = h("table", { id: "campaigns" },
    h("thead", {}, h("tr", {}, ["Sent at (Paris)", "DAG / run / task", "Ticket", "Type", "Scheduled for", "Sent", "Filtered", "Cost", "Delivery"]
      .map((name, index) => h("th", { class: index >= 5 && index <= 7 ? "number" : null }, name)))),
    // A filtered page may end before it is full (the API reads a bounded number of campaigns): "Older" reads on.
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 9, class: "muted" },
      page.next ? "No campaign on this page matches: older ones may (Older)." : "No campaign matches."))));
  const pager = h("div", { class: "pager" },
    h("button", { type: "button", disabled: !filters.before, onclick: () => go({ before: null }) }, "Newest"),
    h("button", { type: "button", disabled: !page.next, onclick: () => go({ before: page.next }) }, "Older"),
    legend(true));
  const title = filters.run_id ? `SMS campaigns of this run` : "SMS campaigns";
  // A run's tab has no filters (replaceChildren would write a null out as the text "null").
  app.replaceChildren(...[h("h1", {}, title), filters.run_id ? null : form, table, pager].filter(Boolean));
  sizeBars(app);
}

// ---- one campaign
async function showCampaign(id) {
  const detail = await api(`/campaigns/${id}`);
  const c = detail.campaign;
  const figure = (label, value, extra) => h("div", {}, h("small", { class: "muted" }, label), h("b", {}, value), extra || null);
  const chart = h("div", { class: "chart", id: "chart" }, h("p", { class: "muted" }, "Drawing…"));
  const failed = detail.failed;
  const table = (rows, head) => h("table", {}, h("thead", {}, h("tr", {}, head.map((name, i) => h("th", { class: i ? "number" : null }, name)))),
    h("tbody", {}, rows.length ? rows.map(([name, count]) => h("tr", {}, h("td", {}, name), h("td", { class: "number" }, NUMBER.format(count))))
      : h("tr", {}, h("td", { colspan: 2, class: "muted" }, "none"))));
  const numbers = h("section", { id: "failed-numbers" }, h("h2", {}, "Failed numbers"),
    failed.masked ? h("p", { class: "muted" }, "Masked: telephone numbers are shown in full only to users who may edit this DAG.") : null,
    h("table", {}, h("tbody", {}, failed.numbers.map((number) => h("tr", {}, h("td", {}, h("code", {}, number)))))),
    failed.more ? h("p", { class: "muted" }, failed.masked ? "More failed numbers than these." : "More: download the CSV for all of them.") : null,
    failed.masked ? null : h("p", {}, h("a", { href: `${API}/campaigns/${c.id}/failed.csv`, download: `sms-campaign-${c.id}-failed.csv`, id: "csv" }, "Download the failed numbers (CSV)")));
  app.replaceChildren(
    h("p", {}, h("a", { href: "#/" }, "← SMS campaigns")),
    h("h1", {}, `Campaign ${c.tickets.join(", ") || "(no ticket)"}`, OUTCOMES[c.outcome] ? h("span", { class: "warn" }, ` — ${OUTCOMES[c.outcome]}`) : null),
    h("p", {}, airflowLink(`/dags/${quote(c.dag_id)}`, c.dag_id), " / ", airflowLink(runPath(c), c.run_id), " / ",
      airflowLink(taskPath(c), c.task_id), h("span", { class: "muted" }, ` · ${c.operator} · connection ${c.conn_id}`)),
    h("div", { class: "figures" },
      figure("Sent at (Paris)", when(c.sent_at)),
      figure("Scheduled for (Paris)", scheduled(c)),
      figure("Type", c.pushtype || "not given"),
      figure("Numbers sent", NUMBER.format(c.sent), h("small", { class: "muted" }, ` of ${NUMBER.format(c.total)}`)),
      figure("Filtered", filteredText(c)),
      figure("Cost", `${NUMBER.format(c.cost)} credits`, h("small", { class: "muted" }, c.max_cost !== null ? ` gate ${NUMBER.format(c.max_cost)}` : "")),
      figure("Delivered", c.delivery.reports_received === false ? "not received" : `${(100 * c.delivery.delivered_share).toFixed(1)} %`, bar(c.delivery)),
      figure("Failed", NUMBER.format(c.delivery.failed)),
      figure("Not yet final", NUMBER.format(c.delivery.not_final))),
    h("h2", {}, "Delivery over time"), chart, h("p", {}, legend(false), h("span", { class: "muted" }, " (share of the numbers sent)")),
    h("div", { class: "columns" },
      h("section", {}, h("h2", {}, "Failures by status"), table(Object.entries(detail.failed_by_status), ["Status", "Messages"])),
      h("section", {}, h("h2", {}, "Failures by country"), table(Object.entries(detail.failed_by_country), ["Country", "Messages"])),
      numbers));
  sizeBars(app);
  chart.innerHTML = await api(`/campaigns/${c.id}/delivery.svg`); // our own SVG: numbers and fixed labels
}

// ---- a task instance's campaigns (the send tasks' "SMS campaign" extra link): its campaign when it sent
// one (the usual case), else the list of them.
async function showTask(query) {
  const page = await api("/campaigns", {
    dag_id: query.get("dag_id"), run_id: runId(query), task_id: query.get("task_id"), map_index: query.get("map_index"), limit: 2,
  });
  if (page.campaigns.length === 1) {
    location.replace(`#/campaign/${page.campaigns[0].id}`);
    return;
  }
  await showList(query);
}

// The extra link opens Airflow's UI at <base>/plugin/sms-campaigns#/task?...: the frame is loaded with
// the view's own address, so the route is taken from the host's address (same origin), once.
function adoptHostRoute() {
  try {
    const host = window.parent !== window ? window.parent.location : null;
    // replaceState: no hashchange (route() runs next anyway).
    if (!location.hash && host && host.hash.startsWith("#/")) history.replaceState(null, "", host.hash);
  } catch (e) { /* a host we cannot read */ }
}

async function route() {
  view += 1;
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, search] = hash.split("?");
  const query = new URLSearchParams(search || location.search);
  try {
    const found = path.match(/^\/campaign\/(\d+)$/);
    if (found) await showCampaign(found[1]);
    else if (path === "/task") await showTask(query);
    else await showList(query);
  } catch (error) {
    if (error instanceof Superseded) return;
    const text = error instanceof NotLoggedIn ? "Log in to Airflow to see the SMS campaigns." : `Cannot show this: ${error.message}`;
    app.replaceChildren(h("h1", {}, "SMS campaigns"), h("p", { class: "warn", id: "error" }, text));
  }
}

followTheme();
adoptHostRoute();
window.addEventListener("hashchange", route);
route();
