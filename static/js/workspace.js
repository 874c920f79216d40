// The notebook workspace: tabs between the four panes on a narrow screen (Sources, Chat,
// Studio, Notes), remembered for the tab's session; without JavaScript the panes simply stack.
// Keeps the composer's "from=workspace" marker on a form the socket replaced, so a plain post
// (socket down) comes back here. No inline scripts: everything is wired here.
(function () {
  "use strict";

  const NARROW = window.matchMedia("(max-width: 900px)");
  const KEY = "notebook.workspace.tab";

  function root() {
    return document.getElementById("workspace");
  }

  function show(name, focusTab) {
    const ws = root();
    if (!ws) return;
    ws.querySelectorAll("[data-pane]").forEach(function (pane) {
      pane.toggleAttribute("data-active", pane.dataset.pane === name);
    });
    ws.querySelectorAll("[data-tab]").forEach(function (tab) {
      const selected = tab.dataset.tab === name;
      tab.setAttribute("aria-selected", selected ? "true" : "false");
      tab.tabIndex = selected ? 0 : -1;
      if (selected && focusTab) tab.focus();
    });
    try {
      sessionStorage.setItem(KEY, name);
    } catch (e) {
      /* private mode: not remembered */
    }
  }

  function applyLayout() {
    const ws = root();
    if (!ws) return;
    const tabs = ws.querySelector("[data-tabs]");
    if (NARROW.matches) {
      tabs.hidden = false;
      ws.setAttribute("data-tabs-on", "");
      let name = "chat";
      try {
        name = sessionStorage.getItem(KEY) || "chat";
      } catch (e) {
        /* keep chat */
      }
      show(name, false);
    } else {
      tabs.hidden = true;
      ws.removeAttribute("data-tabs-on");
    }
  }

  document.addEventListener("click", function (event) {
    const tab = event.target.closest ? event.target.closest("[data-tab]") : null;
    if (tab) show(tab.dataset.tab, false);
  });

  document.addEventListener("keydown", function (event) {
    const tab = event.target.closest ? event.target.closest("[data-tab]") : null;
    if (!tab || (event.key !== "ArrowRight" && event.key !== "ArrowLeft")) return;
    const all = Array.from(root().querySelectorAll("[data-tab]"));
    const step = event.key === "ArrowRight" ? 1 : -1;
    const next = all[(all.indexOf(tab) + step + all.length) % all.length];
    show(next.dataset.tab, true);
    event.preventDefault();
  });

  // Esc closes an open menu of the page (the conversation picker, "Add to a note…") and
  // puts the focus back on what opened it.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    const open = event.target.closest ? event.target.closest("details[open]") : null;
    const menu = open || document.querySelector(".conversation-picker[open], .save-more[open]");
    if (!menu) return;
    menu.open = false;
    const summary = menu.querySelector("summary");
    if (summary) summary.focus();
  });

  function markForm() {
    const form = document.querySelector("#workspace #ask-form");
    if (!form || form.querySelector("input[name=from]")) return;
    const marker = document.createElement("input");
    marker.type = "hidden";
    marker.name = "from";
    marker.value = "workspace";
    form.appendChild(marker);
  }

  // Studio makes its outputs from the ticked sources: the unticked ones go with the request
  // as `excluded` (source refs, as the chat sends them).
  function unticked() {
    const refs = [];
    document.querySelectorAll("#workspace .source-check").forEach(function (box) {
      if (!box.checked && box.dataset.sourceRef) refs.push(box.dataset.sourceRef);
    });
    return JSON.stringify(refs);
  }

  document.addEventListener("htmx:configRequest", function (event) {
    const form = event.target.closest ? event.target.closest("[data-studio-form]") : null;
    if (form) event.detail.parameters.excluded = unticked();
  });
  document.addEventListener("submit", function (event) {
    const form = event.target.closest ? event.target.closest("[data-studio-form]") : null;
    const field = form ? form.querySelector("[data-studio-excluded]") : null;
    if (field) field.value = unticked();
  });

  document.addEventListener("htmx:wsAfterMessage", markForm);
  document.addEventListener("htmx:oobAfterSwap", markForm);
  NARROW.addEventListener("change", applyLayout);
  document.addEventListener("DOMContentLoaded", function () {
    applyLayout();
    markForm();
  });
})();
