// llamaherd dashboard: keeps [data-live] parts of a page fresh and streams a run's log.
"use strict";

const REFRESH_MS = 1500;

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

async function refresh() {
  const live = document.querySelectorAll("[data-live]");
  if (!live.length) return false;
  try {
    const response = await fetch(location.href, {
      cache: "no-store",
      headers: { "X-Dashboard-Refresh": "1" },
    });
    if (response.ok) {
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      for (const el of live) {
        const fresh = doc.getElementById(el.id);
        if (fresh) patch(el, fresh);
      }
    }
  } catch (err) {
    // the scheduler may be restarting: try again on the next tick
  }
  return true;
}

async function poll() {
  if (await refresh()) setTimeout(poll, REFRESH_MS);
}

function span(cls, text) {
  const el = document.createElement("span");
  el.className = cls;
  el.textContent = text;
  return el;
}

function logLine(event) {
  const line = document.createElement("div");
  line.className = "line ev-" + event.type;
  const at = new Date(event.at * 1000).toISOString().slice(11, 19);
  line.append(span("t", at), " ", span("k", event.type), " ", span("s", event.summary));
  if (event.output) {
    const out = document.createElement("div");
    out.className = "out";
    out.textContent = event.output;
    line.append(out);
  }
  return line;
}

function follow(log) {
  const source = new EventSource(log.dataset.stream);
  source.onmessage = (message) => {
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
    log.append(logLine(JSON.parse(message.data)));
    if (atBottom) log.scrollTop = log.scrollHeight;
  };
  source.addEventListener("end", (message) => {
    source.close();
    const state = document.getElementById("log-state");
    if (state) state.textContent = "Run ended: " + JSON.parse(message.data).state + ".";
    refresh();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const log = document.querySelector(".log");
  if (log) log.scrollTop = log.scrollHeight;
  if (log && log.dataset.stream) follow(log);
  setTimeout(poll, REFRESH_MS);
});
