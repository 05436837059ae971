// babelqueue console: the little script the pages need. No framework, no build.
"use strict";

(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const csrf = () => ($('meta[name="csrf-token"]') || {}).content || "";
  const page = document.body.dataset.page;

  // ---- theme -------------------------------------------------------------
  const THEME = "bq-console-theme";
  function applyTheme(t) {
    if (t === "light" || t === "dark") document.documentElement.dataset.theme = t;
    else delete document.documentElement.dataset.theme;
  }
  applyTheme(localStorage.getItem(THEME));
  function toggleTheme() {
    const dark = document.documentElement.dataset.theme
      ? document.documentElement.dataset.theme === "dark"
      : matchMedia("(prefers-color-scheme: dark)").matches;
    const next = dark ? "light" : "dark";
    localStorage.setItem(THEME, next);
    applyTheme(next);
  }
  $("#theme-toggle") && $("#theme-toggle").addEventListener("click", toggleTheme);
  const keys = $("#keys");
  $("#keys-toggle") && $("#keys-toggle").addEventListener("click", () => keys.showModal());

  // ---- helpers -----------------------------------------------------------
  const fmt = new Intl.NumberFormat("en");
  const count = (n) => (n === undefined || n === null || n < 0 ? "—" : fmt.format(n));
  const age = (s) => {
    if (s === undefined || s === null) return "—";
    if (s < 1) return Math.round(s * 1000) + "ms";
    let t = Math.round(s), out = "";
    const h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), sec = t % 60;
    if (h) out += h + "h";
    if (h || m) out += m + "m";
    return out + sec + "s";
  };
  const rate = (r) => (r === undefined || r === null ? "—" : (r >= 0 ? "+" : "") + r.toFixed(1) + "/s");
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  }
  function ago(ms) {
    if (!ms) return "—";
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 60) return s + "s ago";
    if (s < 3600) return Math.floor(s / 60) + "m ago";
    if (s < 172800) return Math.floor(s / 3600) + "h ago";
    return Math.floor(s / 86400) + "d ago";
  }
  async function getJSON(url) {
    const r = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    const j = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(j.error || r.status + " " + r.statusText);
    return j;
  }
  async function postJSON(url, body) {
    const r = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
      body: JSON.stringify(body),
    });
    const j = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(j.error || r.status + " " + r.statusText);
    return j;
  }

  // ---- keyboard ----------------------------------------------------------
  let pendingG = false;
  function rows() { return $$("table.rows tbody tr[data-ref]"); }
  function current() { return $("table.rows tbody tr.current"); }
  function move(step) {
    const all = rows();
    if (!all.length) return;
    let i = all.indexOf(current());
    if (current()) current().classList.remove("current");
    i = i < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, i + step));
    all[i].classList.add("current");
    all[i].scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("keydown", (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const t = ev.target;
    if (t && (t.isContentEditable || /^(INPUT|SELECT|TEXTAREA)$/.test(t.tagName))) {
      if (ev.key === "Escape") t.blur();
      return;
    }
    if ($("dialog[open]")) return; // a dialog handles its own keys (Esc closes it)
    const k = ev.key;
    if (pendingG) {
      pendingG = false;
      if (k === "o") { location.href = "/"; ev.preventDefault(); }
      return;
    }
    switch (k) {
      case "/": { const s = $("#search-box"); if (s) { s.focus(); s.select(); ev.preventDefault(); } break; }
      case "g": pendingG = true; break;
      case "j": move(1); ev.preventDefault(); break;
      case "k": move(-1); ev.preventDefault(); break;
      case "Enter": { const r = current(); const a = r && $("a.open", r); if (a) { a.click(); ev.preventDefault(); } break; }
      case "x": { const r = current(); const c = r && $("input.pick", r); if (c) { c.click(); ev.preventDefault(); } break; }
      case "r": { const b = $("#redrive-selected:not(:disabled)") || $("#redrive-one"); if (b) { b.click(); ev.preventDefault(); } break; }
      case "[": { const a = $("#page-prev"); if (a) a.click(); break; }
      case "]": { const a = $("#page-next"); if (a) a.click(); break; }
      case "t": toggleTheme(); break;
      case "?": keys.showModal(); break;
    }
  });

  // ---- overview ----------------------------------------------------------
  function spark(svg, s) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (!s || !s.t || s.t.length < 2) return;
    const W = 160, H = 36, n = s.t.length;
    const line = (vals, cls) => {
      const top = Math.max(1, ...vals);
      const pts = vals.map((v, i) => (i * W / (n - 1)).toFixed(1) + "," + (H - 2 - (Math.max(v, 0) / top) * (H - 4)).toFixed(1));
      const p = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
      p.setAttribute("points", pts.join(" "));
      p.setAttribute("class", cls);
      svg.appendChild(p);
    };
    line(s.ready, "ready");
    line(s.dlq, "dlq");
    if (s.arrivals && s.arrivals.length === n) line(s.arrivals, "arrivals");
    const last = n - 1;
    svg.setAttribute("aria-label", "Last " + Math.round((s.t[last] - s.t[0]) / 1000) + " s: ready " + count(s.ready[last]) + ", dead letters " + count(s.dlq[last]) + " (each line scaled to its own peak)");
  }
  function renderOverview(data) {
    for (const b of data.brokers) {
      const sec = $('section.broker[data-broker="' + b.id + '"]');
      if (!sec) continue;
      const err = $('[data-k="error"]', sec);
      err.hidden = !b.error;
      err.textContent = b.error ? "Counting failed: " + b.error : "";
      for (const q of b.queues) {
        const tr = $$("tr[data-queue]", sec).find((r) => r.dataset.queue === q.name);
        if (!tr) continue;
        const st = q.stats || {}, dl = q.dlq_stats || {};
        $('[data-k="ready"]', tr).textContent = q.stats ? count(st.ready) : "—";
        $('[data-k="in_flight"]', tr).textContent = q.stats ? count(st.in_flight) : "—";
        $('[data-k="delayed"]', tr).textContent = q.stats ? count(st.delayed) : "—";
        $('[data-k="oldest"]', tr).textContent = age(q.oldest_age_s);
        $('[data-k="arrivals"]', tr).textContent = rate(q.arrivals_per_s);
        $('[data-k="dlq"]', tr).textContent = q.dlq_stats ? count(dl.ready) : "—";
        spark($("svg.spark", tr), q.series);
      }
    }
    const u = $("#overview-updated");
    if (u) u.textContent = "Updated " + new Date().toLocaleTimeString() + ".";
  }
  if (page === "overview") {
    const box = $("#overview");
    const every = Math.max(1000, Number(box.dataset.interval) || 5000);
    const tick = () => getJSON("/api/overview").then(renderOverview).catch((e) => {
      const u = $("#overview-updated");
      if (u) u.textContent = "Update failed: " + e.message;
    });
    tick();
    setInterval(tick, every);
  }

  // ---- selection and redrive ---------------------------------------------
  const sel = $("#selection");
  const dialog = $("#redrive-dialog");
  let choice = null; // {refs: [...]} or {all: true, filter: {...}}
  let previewSeq = 0;

  function picked() { return $$("input.pick:checked").map((c) => c.value); }
  function updatePicked() {
    const n = picked().length;
    const b = $("#redrive-selected");
    if (b) b.disabled = n === 0;
    const c = $("#nsel");
    if (c) c.textContent = n;
    const all = $("#select-page");
    if (all) {
      const boxes = $$("input.pick");
      all.checked = boxes.length > 0 && n === boxes.length;
      all.indeterminate = n > 0 && n < boxes.length;
    }
  }
  $$("input.pick").forEach((c) => c.addEventListener("change", updatePicked));
  const selectPage = $("#select-page");
  if (selectPage) selectPage.addEventListener("change", () => {
    $$("input.pick").forEach((c) => { c.checked = selectPage.checked; });
    updatePicked();
  });
  updatePicked();

  function request(extra) {
    return Object.assign({
      b: Number(sel.dataset.b),
      q: sel.dataset.q,
      bypass: $("#rd-bypass").checked,
      poison: $("#rd-poison").checked,
      target: $("#rd-target").value,
    }, choice, extra);
  }
  function itemsTable(items) {
    const tb = el("tbody");
    for (const it of items) {
      tb.append(el("tr", {},
        el("td", { text: it.action === "would_move" ? "moves" : "stays" }),
        el("td", { class: "id", text: it.id || "(poison)" }),
        el("td", { text: it.urn || "" }),
        el("td", { text: it.action === "would_move" ? "→ " + it.to : it.why || "" })));
    }
    return el("table", {}, el("thead", {}, el("tr", {}, el("th", { text: "" }), el("th", { text: "meta.id" }), el("th", { text: "URN" }), el("th", { text: "Where" }))), tb);
  }
  async function runPreview() {
    const seq = ++previewSeq;
    const go = $("#rd-go"), out = $("#rd-preview");
    go.disabled = true;
    go.textContent = "Move";
    out.replaceChildren(el("p", { text: "Dry run: reading the queue…" }));
    try {
      const p = await postJSON("/api/redrive", request({ dry_run: true }));
      if (seq !== previewSeq) return;
      const moved = p.result.moved;
      const to = Object.entries(p.result.to || {}).map(([q, n]) => n + " to " + q).join(", ");
      const stay = p.items.filter((i) => i.action !== "would_move").length;
      const kids = [el("p", { class: "summary", id: "rd-summary", "data-moves": String(moved), text:
        "Dry run: " + moved + " message" + (moved === 1 ? "" : "s") + " would move" + (to ? " (" + to + ")" : "") +
        (stay ? "; " + stay + " of the selection would stay" : "") + ". Nothing was moved." })];
      if (p.missing) kids.push(el("p", { class: "error", text: p.missing + " selected message(s) are no longer on the queue." }));
      if (p.items.length) kids.push(itemsTable(p.items));
      if (p.more) kids.push(el("p", { class: "muted", text: "and " + p.more + " more" }));
      out.replaceChildren(...kids);
      if (moved > 0 && !document.body.dataset.readonly) {
        go.disabled = false;
        go.textContent = "Move " + moved + " message" + (moved === 1 ? "" : "s");
      }
    } catch (e) {
      if (seq === previewSeq) out.replaceChildren(el("p", { class: "error", role: "alert", text: e.message }));
    }
  }
  function openRedrive(c, what) {
    choice = c;
    $("#rd-what").textContent = what;
    $("#rd-poison").checked = false;
    $("#rd-bypass").checked = false;
    $("#rd-target").value = "";
    dialog.showModal();
    runPreview();
  }
  async function confirmRedrive() {
    const go = $("#rd-go"), out = $("#rd-preview");
    go.disabled = true;
    $$("#rd-form input, #rd-form select").forEach((i) => { i.disabled = true; });
    try {
      const { job } = await postJSON("/api/redrive", request({ confirm: true }));
      const line = el("p", { class: "summary", text: "Moving…" });
      out.replaceChildren(line);
      for (;;) {
        const j = await getJSON("/api/jobs/" + encodeURIComponent(job));
        line.textContent = "Moved " + j.moved + (j.planned >= 0 ? " of " + j.planned : "") + (j.kept ? ", " + j.kept + " put back" : "") + "…";
        if (j.done) {
          const done = el("p", { class: j.error ? "error" : "done", id: "rd-done", "data-moved": String(j.moved), text:
            (j.error ? "Stopped: " + j.error + ". " : "") + "Moved " + j.moved + " message" + (j.moved === 1 ? "" : "s") + "." });
          out.replaceChildren(done, el("p", { class: "muted", text: "Reloading…" }));
          setTimeout(() => {
            if (sel.dataset.single) location.href = "/dlq?b=" + sel.dataset.b + "&q=" + encodeURIComponent(sel.dataset.q);
            else location.reload();
          }, 1200);
          return;
        }
        await new Promise((r) => setTimeout(r, 400));
      }
    } catch (e) {
      out.replaceChildren(el("p", { class: "error", role: "alert", text: e.message }));
    }
  }
  if (dialog) {
    ["#rd-bypass", "#rd-poison", "#rd-target"].forEach((s) => $(s).addEventListener("change", runPreview));
    $("#rd-go").addEventListener("click", confirmRedrive);
    dialog.addEventListener("close", () => {
      previewSeq++;
      $$("#rd-form input, #rd-form select").forEach((i) => { i.disabled = false; });
    });
    const bs = $("#redrive-selected");
    if (bs) bs.addEventListener("click", () => {
      const refs = picked();
      openRedrive({ refs }, refs.length + " selected message" + (refs.length === 1 ? "" : "s") + " of " + sel.dataset.q + ".");
    });
    const ba = $("#redrive-all");
    if (ba) ba.addEventListener("click", () => {
      const filter = JSON.parse(sel.dataset.filter || "{}");
      const parts = Object.entries(filter).map(([k, v]) => k + " = " + (v || "(none)"));
      openRedrive({ all: true, filter }, "Every message of " + sel.dataset.q + (parts.length ? " with " + parts.join(", ") : "") +
        " (" + fmt.format(Number(sel.dataset.matching)) + " when the page was read).");
    });
    const b1 = $("#redrive-one");
    if (b1) b1.addEventListener("click", () => openRedrive({ refs: [sel.dataset.single] }, "This message."));
  }

  // ---- dead-letter page: follow the index ---------------------------------
  const status = $("#index-status");
  if (status) {
    const version = status.dataset.version;
    const poll = () => getJSON("/api/dlq?status=1&b=" + status.dataset.b + "&q=" + encodeURIComponent(status.dataset.q)).then((s) => {
      if (!s.ready) {
        status.textContent = "Reading the queue… " + fmt.format(s.read) + " messages so far." + (s.error ? " " + s.error : "");
        return;
      }
      if (String(s.version) !== version) {
        if (picked().length === 0 && !(dialog && dialog.open)) location.reload();
        else if (!$("#index-new")) status.append(el("span", { id: "index-new", text: " · newer counts: reload to see them" }));
      }
    }).catch(() => {});
    setInterval(poll, status.dataset.ready === "true" ? 3000 : 700);
  }

  // ---- live tail ---------------------------------------------------------
  const tail = $("#tail");
  if (tail) {
    const body = $("#tail-rows"), st = $("#tail-status"), pause = $("#tail-pause");
    let paused = false, held = [];
    const addRow = (m) => {
      const tr = el("tr", { "data-ref": m.ref },
        el("td", { class: "nowrap", text: m.backlog ? "waiting" : new Date(m.seen_at).toLocaleTimeString() }),
        el("td", {}, m.reason ? el("span", { class: "reason r-" + m.reason, text: m.reason }) : ""),
        el("td", { class: "urn", text: m.urn }),
        el("td", { text: m.lang }),
        el("td", { class: "err", text: m.error }),
        el("td", { class: "id" }, el("a", { class: "open", href: m.url, text: m.id || "(poison) " + m.ref })));
      body.prepend(tr);
      while (body.children.length > 500) body.lastChild.remove();
    };
    const es = new EventSource("/api/tail?b=" + tail.dataset.b + "&q=" + encodeURIComponent(tail.dataset.q));
    es.addEventListener("message", (ev) => {
      const m = JSON.parse(ev.data);
      if (paused) held.push(m); else addRow(m);
    });
    es.addEventListener("status", (ev) => {
      const s = JSON.parse(ev.data);
      st.textContent = (s.error ? "Reading failed (retrying): " + s.error : s.caught_up ? "Watching" : "Catching up…") +
        " · read " + new Date(s.at).toLocaleTimeString() + (paused ? " · paused, " + held.length + " held" : "");
      st.classList.toggle("error", !!s.error);
    });
    es.onerror = () => { st.textContent = "Disconnected: reconnecting…"; };
    pause.addEventListener("click", () => {
      paused = !paused;
      pause.setAttribute("aria-pressed", String(paused));
      pause.textContent = paused ? "Resume" : "Pause";
      if (!paused) { held.forEach(addRow); held = []; }
    });
    $("#tail-clear").addEventListener("click", () => body.replaceChildren());
    addEventListener("pagehide", () => es.close());
  }
})();
