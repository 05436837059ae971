// babelqueue console: delete and export dead letters (the dead-letter page).
// Delete runs a dry run first, then asks to confirm the count it found; the deletion
// is bounded by that count and runs as a job the dialog follows. Export submits a
// form, so the browser downloads the JSON lines as they are read.
"use strict";

(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const csrf = () => ($('meta[name="csrf-token"]') || {}).content || "";
  const sel = $("#selection");
  const dialog = $("#delete-dialog");
  if (!sel || !dialog) return;
  const fmt = new Intl.NumberFormat("en");
  const plural = (n, one) => fmt.format(n) + " " + one + (n === 1 ? "" : "s");
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

  function picked() { return $$("input.pick:checked").map((c) => c.value); }
  function updateButtons() {
    const n = picked().length;
    for (const id of ["#delete-selected", "#export-selected"]) {
      const b = $(id);
      if (b) b.disabled = n === 0;
    }
    const d = $("#delete-selected");
    if (d) d.textContent = n ? "Delete " + n + " selected…" : "Delete selected…";
  }
  document.addEventListener("change", (ev) => {
    if (ev.target && (ev.target.matches("input.pick") || ev.target.id === "select-page")) updateButtons();
  });
  updateButtons();

  function filterChoice() {
    return { all: true, filter: JSON.parse(sel.dataset.filter || "{}") };
  }
  function describeFilter() {
    const f = JSON.parse(sel.dataset.filter || "{}");
    const parts = Object.entries(f).map(([k, v]) => k + " = " + (v || "(none)"));
    return "Every message of " + sel.dataset.q + (parts.length ? " with " + parts.join(", ") : "") +
      " (" + fmt.format(Number(sel.dataset.matching)) + " when the page was read).";
  }

  // ---- export -------------------------------------------------------------
  function exportChoice(c) {
    const form = $("#export-form");
    form.elements.refs.value = c.refs ? c.refs.join(",") : "";
    form.elements.all.value = c.all ? "1" : "";
    form.elements.filter.value = c.all ? JSON.stringify(c.filter || {}) : "";
    form.submit();
  }
  const es = $("#export-selected");
  if (es) es.addEventListener("click", () => exportChoice({ refs: picked() }));
  const ea = $("#export-all");
  if (ea) ea.addEventListener("click", () => exportChoice(filterChoice()));

  // ---- delete -------------------------------------------------------------
  let choice = null;
  let plan = null; // the dry run's result
  let seq = 0;

  function request(extra) {
    return Object.assign({ b: Number(sel.dataset.b), q: sel.dataset.q }, choice, extra);
  }
  function counts(title, groups, none) {
    if (!groups || !groups.length) return null;
    return el("p", { class: "counts" }, el("strong", { text: title + ": " }),
      groups.map((g) => fmt.format(g.count) + " " + (g.key || none)).join(", "));
  }
  function itemsTable(items) {
    const tb = el("tbody");
    for (const it of items) {
      tb.append(el("tr", {},
        el("td", { text: it.reason || "" }),
        el("td", { class: "urn", text: it.urn || "(poison)" }),
        el("td", { class: "id", text: it.id || "" })));
    }
    return el("table", {}, el("thead", {}, el("tr", {}, el("th", { text: "Reason" }), el("th", { text: "URN" }), el("th", { text: "meta.id" }))), tb);
  }
  async function preview() {
    const n = ++seq;
    const go = $("#del-go"), out = $("#del-preview");
    go.disabled = true;
    go.textContent = "Delete";
    plan = null;
    out.replaceChildren(el("p", { text: "Dry run: reading the queue…" }));
    try {
      const p = await postJSON("/api/delete", request({ dry_run: true }));
      if (n !== seq) return;
      plan = p.result;
      const k = plan.removed;
      const kids = [el("p", { class: "summary", id: "del-summary", "data-removes": String(k), text:
        "Dry run: " + plural(k, "message") + " would be deleted. Nothing was deleted." })];
      const byReason = counts("By reason", plan.selected.reasons, "(no dead_letter block)");
      const byURN = counts("By URN", plan.selected.urns, "(not an envelope)");
      if (byReason) kids.push(byReason);
      if (byURN) kids.push(byURN);
      if (p.missing) kids.push(el("p", { class: "error", text: p.missing + " selected message(s) are no longer on the queue." }));
      if (p.note) kids.push(el("p", { class: "note", id: "del-note", text: p.note }));
      if (p.items.length) kids.push(itemsTable(p.items));
      if (p.more) kids.push(el("p", { class: "muted", text: "and " + p.more + " more" }));
      out.replaceChildren(...kids);
      if (k > 0) {
        go.disabled = false;
        go.textContent = plan.group ? "Move the group past " + plural(k, "message") : "Delete " + plural(k, "message");
      }
    } catch (e) {
      if (n === seq) out.replaceChildren(el("p", { class: "error", role: "alert", text: e.message }));
    }
  }
  function openDelete(c, what) {
    choice = c;
    $("#del-what").textContent = what;
    dialog.showModal();
    preview();
  }
  async function confirmDelete() {
    const go = $("#del-go"), out = $("#del-preview");
    if (!plan) return;
    go.disabled = true;
    try {
      const { job } = await postJSON("/api/delete", request({ confirm: true, max: plan.removed, commit_past: !!plan.group }));
      const line = el("p", { class: "summary", text: "Deleting…" });
      out.replaceChildren(line);
      for (;;) {
        const j = await getJSON("/api/jobs/" + encodeURIComponent(job));
        line.textContent = "Deleted " + j.moved + (j.planned >= 0 ? " of " + j.planned : "") + "…";
        if (j.done) {
          out.replaceChildren(el("p", { class: j.error ? "error" : "done", id: "del-done", "data-removed": String(j.moved), text:
            (j.error ? "Stopped: " + j.error + ". " : "") + "Deleted " + plural(j.moved, "message") + "." }),
          el("p", { class: "muted", text: "Reloading…" }));
          setTimeout(() => location.reload(), 1200);
          return;
        }
        await new Promise((r) => setTimeout(r, 400));
      }
    } catch (e) {
      out.replaceChildren(el("p", { class: "error", role: "alert", text: e.message }));
    }
  }
  $("#del-go").addEventListener("click", confirmDelete);
  $("#del-export").addEventListener("click", () => { if (choice) exportChoice(choice); });
  dialog.addEventListener("close", () => { seq++; });
  const ds = $("#delete-selected");
  if (ds) ds.addEventListener("click", () => {
    const refs = picked();
    openDelete({ refs }, plural(refs.length, "selected message") + " of " + sel.dataset.q + ".");
  });
  const da = $("#delete-all");
  if (da) da.addEventListener("click", () => openDelete(filterChoice(), describeFilter()));
})();
