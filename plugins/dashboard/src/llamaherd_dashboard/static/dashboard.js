// llamaherd dashboard: one live stream per page (/api/live) patches the page's [data-live]
// parts in place and appends a run's conversation; buttons with data-post act through fetch.
"use strict";

const csrf = () => document.querySelector('meta[name="csrf-token"]').content;

// Change `old` into `fresh` touching only nodes that differ, so buttons and focus survive.
function patch(old, fresh) {
  if (old.isEqualNode(fresh)) return;
  const a = old.childNodes, b = fresh.childNodes;
  const sameShell = old.nodeType === 1 && old.cloneNode(false).isEqualNode(fresh.cloneNode(false));
  if (!sameShell || a.length !== b.length || a.length === 0) {
    old.replaceWith(document.importNode(fresh, true));
    return;
  }
  for (let i = a.length - 1; i >= 0; i--) patch(a[i], b[i]);
}

// Someone typing (a reply, a filter) keeps the part they type in until they leave it.
function typing(el) {
  const active = document.activeElement;
  return el.contains(active) && active.matches("textarea, input:not([type=hidden])");
}

function patchPage(html) {
  const doc = new DOMParser().parseFromString(html, "text/html");
  for (const el of document.querySelectorAll("[data-live]")) {
    const fresh = doc.getElementById(el.id);
    if (fresh && !typing(el)) patch(el, fresh);
  }
}

function flash(text, note) {
  const el = document.getElementById("alert");
  el.textContent = text;
  el.classList.toggle("note", !!note);
  el.hidden = !text;
}

async function post(url, fields) {
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: { "X-CSRF-Token": csrf(), "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(fields || {}),
    });
    const answer = await response.json().catch(() => ({}));
    // A note says what will happen (a run queued while paused); an error why it was refused.
    flash(response.ok ? answer.note || "" : answer.error || "refused (" + response.status + ")",
          response.ok);
  } catch (err) {
    flash("the scheduler did not answer");
  }
}

// The agent a control acts on: its own data-state, else its overview row's data-agent.
function agentOf(el) {
  return encodeURIComponent(el.dataset.state || el.closest("tr[data-agent]").dataset.agent);
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-post], [data-run-now]");
  if (!button) return;
  event.preventDefault();
  post(button.dataset.post || "/api/agents/" + agentOf(button) + "/run");
});

document.addEventListener("change", (event) => {
  const select = event.target.closest("select[data-state]");
  if (!select) return;
  post("/api/agents/" + agentOf(select) + "/state", { state: select.value });
});

function follow() {
  const path = document.body.dataset.livePath;
  if (!path) return;
  const log = document.getElementById("log");
  let url = "/api/live?path=" + encodeURIComponent(path + location.search);
  if (log && log.dataset.after) url += "&after=" + log.dataset.after;
  const source = new EventSource(url);
  source.addEventListener("page", (message) => patchPage(message.data));
  source.addEventListener("log", (message) => {
    const entry = JSON.parse(message.data);
    if (log.querySelector('[data-id="' + entry.id + '"]')) return;
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
    log.insertAdjacentHTML("beforeend", entry.html);
    log.dataset.after = entry.id;
    if (atBottom) log.scrollTop = log.scrollHeight;
  });
  source.addEventListener("end", () => source.close());
}

document.addEventListener("DOMContentLoaded", () => {
  const log = document.getElementById("log");
  if (log) log.scrollTop = log.scrollHeight;
  follow();
});
