// The composer's source selection: `@` / `@@` mentions that become chips above the question,
// and the sources pane's checkboxes; chips and boxes are one selection. It travels with each
// question as two hidden JSON fields of the ask form (`selections`, `excluded`); the server
// re-resolves every ref for the user, so they only carry the user's intent.
//
// - The active token runs from the last whitespace before the cursor to the cursor; it is a
//   mention when it starts with "@" ("@@" for everything), so "me@x" is not one.
// - Suggestions come from chat:mentions (debounced, stale answers dropped) into an ARIA
//   listbox under the textarea; ↑/↓ move, Enter or Tab picks, Esc closes and keeps the text.
//   Picking removes only the token and leaves the cursor where the token was.
// - Chips: removing one adds its refs to `excluded` (dropped from carry-over); choosing a
//   source again takes it out. Boxes: with no chips every box is ticked except the excluded
//   ones; with chips, a box is ticked when a chip covers it.
// - The state lives here across the form being replaced after each question (the socket sends
//   a fresh form); a page load starts from the server's #selection-state.
// No inline scripts and no innerHTML: names are user text and go in with textContent.
(function () {
  "use strict";

  const DEBOUNCE_MS = 150;
  const _ = window.gettext || function (s) { return s; };
  const ngettext = window.ngettext || function (s, p, n) { return n === 1 ? s : p; };
  const interpolate = window.interpolate || function (fmt, args) {
    let i = 0;
    return fmt.replace(/%s/g, function () { return String(args[i++]); });
  };

  // --- Tokens (pure; exported for the browser tests) --------------------------------------

  function isSpace(ch) {
    return /\s/.test(ch);
  }

  // The mention being typed at `cursor`, or null: {start, end, term, everything}. `end` runs
  // on to the next whitespace, so picking replaces the whole token even when the cursor is
  // inside it; `term` is what is typed between the @ and the cursor.
  function activeToken(text, cursor) {
    if (cursor == null || cursor < 0 || cursor > text.length) return null;
    let start = cursor;
    while (start > 0 && !isSpace(text[start - 1])) start--;
    if (text[start] !== "@") return null;
    let end = cursor;
    while (end < text.length && !isSpace(text[end])) end++;
    const everything = text[start + 1] === "@";
    const term = text.slice(start + (everything ? 2 : 1), cursor);
    if (term.indexOf("@") !== -1) return null; // "@a@b" is an address, not a mention
    return { start: start, end: end, term: term, everything: everything };
  }

  // `text` without `token`; the cursor goes where the token began. One of the two spaces
  // around a token in the middle of a sentence goes with it.
  function removeToken(text, token) {
    let end = token.end;
    if (token.start > 0 && isSpace(text[token.start - 1]) && text[end] === " ") end++;
    return { text: text.slice(0, token.start) + text.slice(end), cursor: token.start };
  }

  // --- State ------------------------------------------------------------------------------

  const state = { selections: [], excluded: [], warning: "", loaded: false };

  function form() {
    return document.getElementById("ask-form");
  }

  function field() {
    const f = form();
    return f ? f.querySelector("textarea") : null;
  }

  function readServerState(f) {
    const script = f.querySelector("#selection-state");
    let data = null;
    try {
      data = script ? JSON.parse(script.textContent) : null;
    } catch (e) {
      data = null;
    }
    if (!data || typeof data !== "object") data = {};
    return {
      selections: Array.isArray(data.selections) ? data.selections.filter(validItem) : [],
      excluded: Array.isArray(data.excluded) ? data.excluded.filter(function (r) { return typeof r === "string"; }) : [],
      warning: typeof data.warning === "string" ? data.warning : "",
    };
  }

  function validItem(item) {
    return item && typeof item.ref === "string" && typeof item.name === "string";
  }

  function exclude(ref) {
    if (state.excluded.indexOf(ref) === -1) state.excluded.push(ref);
  }

  function include(ref) {
    state.excluded = state.excluded.filter(function (r) { return r !== ref; });
  }

  function boxes() {
    return Array.from(document.querySelectorAll(".source-check[data-source-ref]"));
  }

  function folderRef(box) {
    return "notebook:" + box.dataset.notebook;
  }

  function coveringChip(box) {
    const ref = box.dataset.sourceRef;
    return state.selections.find(function (s) {
      return s.ref === ref || (s.kind === "path" && s.ref === folderRef(box));
    });
  }

  function isExcluded(box) {
    return state.excluded.indexOf(box.dataset.sourceRef) !== -1;
  }

  function isTicked(box) {
    if (isExcluded(box)) return false;
    return state.selections.length === 0 || !!coveringChip(box);
  }

  function addChip(item) {
    if (state.selections.some(function (s) { return s.ref === item.ref; })) return;
    state.selections.push(item);
    include(item.ref);
    if (item.kind === "path") {
      // Choosing a folder again means all of it: its boxes come back too.
      boxes().forEach(function (box) {
        if (folderRef(box) === item.ref) include(box.dataset.sourceRef);
      });
    }
  }

  // Removing a folder's chip excludes the folder (the server drops its sources from
  // carry-over, but for those chosen again one by one) and the boxes of it on this page.
  function removeChip(ref) {
    const chip = state.selections.find(function (s) { return s.ref === ref; });
    state.selections = state.selections.filter(function (s) { return s.ref !== ref; });
    if (!chip) return;
    exclude(chip.ref);
    if (chip.kind === "path") {
      boxes().forEach(function (box) {
        if (folderRef(box) === chip.ref && !coveringChip(box)) exclude(box.dataset.sourceRef);
      });
    }
  }

  function onBoxChange(box) {
    const ref = box.dataset.sourceRef;
    if (box.checked) {
      include(ref);
      if (state.selections.length && !coveringChip(box)) {
        addChip({
          kind: "file",
          mode: ref.indexOf("note:") === 0 ? "markdown" : "all",
          ref: ref,
          name: box.dataset.name || ref,
          path: box.dataset.path || box.dataset.name || ref,
          count: 1,
        });
      }
    } else {
      state.selections = state.selections.filter(function (s) { return !(s.kind === "file" && s.ref === ref); });
      exclude(ref);
    }
    state.warning = "";
    render();
  }

  // --- Rendering --------------------------------------------------------------------------

  function folderCount(item) {
    const n = item.count != null ? item.count : item.subfile_count;
    return typeof n === "number" && n > 0 ? n : null;
  }

  function chipLabel(item) {
    if (item.kind !== "path") return item.name;
    const n = folderCount(item);
    return n === null ? item.path || item.name : (item.path || item.name) + " (" + n + ")";
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text != null) node.textContent = text;
    return node;
  }

  function summaryText() {
    if (state.selections.length) {
      let n = 0;
      state.selections.forEach(function (s) { n += s.kind === "path" ? folderCount(s) || 0 : 1; });
      boxes().forEach(function (box) {
        const chip = coveringChip(box);
        if (chip && chip.kind === "path" && isExcluded(box)) n--;
      });
      n = Math.max(n, 0);
      return interpolate(ngettext("Answering from %s selected source", "Answering from %s selected sources", n), [n]);
    }
    // Sources left out (a removed folder chip also excludes the folder, which is no source).
    const out = state.excluded.filter(function (r) { return r.indexOf("notebook:") !== 0; }).length;
    if (!out) return _("All sources");
    return interpolate(ngettext("All sources but %s", "All sources but %s", out), [out]);
  }

  function render() {
    const f = form();
    boxes().forEach(function (box) {
      box.checked = isTicked(box);
    });
    if (!f) return;
    f.querySelector("[data-selections]").value = JSON.stringify(state.selections);
    f.querySelector("[data-excluded]").value = JSON.stringify(state.excluded);
    const list = f.querySelector("[data-chips]");
    list.replaceChildren();
    state.selections.forEach(function (item) {
      const li = el("li", "composer-chip composer-chip-" + (item.kind === "path" ? "folder" : "file"));
      li.dataset.ref = item.ref;
      li.dataset.testid = "selection-chip";
      li.title = item.path || item.name;
      let label;
      if (item.kind === "path" && item.url) {
        label = el("a", "chip-label", chipLabel(item));
        label.href = item.url;
      } else {
        label = el("span", "chip-label", chipLabel(item));
      }
      const remove = el("button", "chip-remove", "×");
      remove.type = "button";
      remove.setAttribute("aria-label", interpolate(_("Remove %s"), [chipLabel(item)]));
      remove.dataset.removeRef = item.ref;
      li.append(label, remove);
      list.appendChild(li);
    });
    list.hidden = state.selections.length === 0;
    const notice = f.querySelector("[data-notice]");
    notice.textContent = state.warning;
    notice.hidden = !state.warning;
    const summary = f.querySelector("[data-summary]");
    if (summary) summary.textContent = summaryText();
  }

  // --- Suggestions ------------------------------------------------------------------------

  const menu = { open: false, items: [], active: -1, token: null, seq: 0, timer: 0, waiting: false };

  function listbox() {
    const f = form();
    return f ? f.querySelector("[data-mention-list]") : null;
  }

  function closeMenu() {
    menu.waiting = false;
    menu.open = false;
    menu.items = [];
    menu.active = -1;
    clearTimeout(menu.timer);
    menu.seq++;
    const list = listbox();
    if (list) {
      list.hidden = true;
      list.replaceChildren();
    }
    const t = field();
    if (t) {
      t.setAttribute("aria-expanded", "false");
      t.removeAttribute("aria-activedescendant");
    }
  }

  const ICONS = { note: "MD", file: "PDF", folder: "▸" };
  const KINDS = { note: function () { return _("Note"); }, file: function () { return _("PDF"); }, folder: function () { return _("Notebook"); } };

  function showMenu(results, emptyText) {
    const list = listbox();
    const t = field();
    if (!list || !t) return;
    const chosen = state.selections.map(function (s) { return s.ref; });
    menu.items = results.filter(function (r) { return chosen.indexOf(r.ref) === -1; });
    menu.active = menu.items.length ? 0 : -1;
    menu.open = true;
    list.replaceChildren();
    menu.items.forEach(function (item, i) {
      const li = el("li", "mention-option");
      li.id = "mention-option-" + i;
      li.setAttribute("role", "option");
      li.dataset.index = String(i);
      li.dataset.kind = item.kind;
      const icon = el("span", "mention-icon mention-icon-" + item.kind, ICONS[item.kind] || "");
      icon.setAttribute("aria-hidden", "true");
      const text = el("span", "mention-text");
      const name = el("span", "mention-name", item.kind === "folder" ? item.name + " (" + item.count + ")" : item.name);
      const kind = el("span", "visually-hidden", " · " + (KINDS[item.kind] ? KINDS[item.kind]() : item.kind) + " · ");
      const path = el("span", "mention-path", item.path);
      text.append(name, kind, path);
      li.append(icon, text);
      list.appendChild(li);
    });
    if (!menu.items.length) {
      const li = el("li", "mention-empty", emptyText || _("No more files found."));
      li.setAttribute("role", "option");
      li.setAttribute("aria-disabled", "true");
      li.id = "mention-empty";
      list.appendChild(li);
    }
    list.hidden = false;
    t.setAttribute("aria-expanded", "true");
    highlight();
  }

  function highlight() {
    const list = listbox();
    const t = field();
    if (!list || !t) return;
    list.querySelectorAll("[role=option]").forEach(function (li) {
      const on = li.dataset.index === String(menu.active);
      li.setAttribute("aria-selected", on ? "true" : "false");
      if (on) li.scrollIntoView({ block: "nearest" });
    });
    if (menu.active >= 0) t.setAttribute("aria-activedescendant", "mention-option-" + menu.active);
    else t.removeAttribute("aria-activedescendant");
  }

  function lookUp() {
    const f = form();
    const t = field();
    if (!f || !t) return;
    const token = t.selectionStart === t.selectionEnd ? activeToken(t.value, t.selectionStart) : null;
    menu.token = token;
    if (!token) {
      if (menu.open) closeMenu();
      clearTimeout(menu.timer);
      menu.seq++;
      menu.waiting = false;
      return;
    }
    clearTimeout(menu.timer);
    const seq = ++menu.seq;
    menu.waiting = true; // until the suggestions are shown (or the list is closed)
    menu.timer = setTimeout(function () {
      const params = new URLSearchParams({ notebook: f.dataset.notebook, q: token.term, all: token.everything ? "1" : "0" });
      fetch(f.dataset.mentionsUrl + "?" + params.toString(), { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) {
          if (!response.ok) throw new Error(String(response.status));
          return response.json();
        })
        .then(function (data) {
          if (seq !== menu.seq) return; // a newer keystroke asked since
          menu.waiting = false;
          showMenu(Array.isArray(data.results) ? data.results : [], data.empty);
        })
        .catch(function () {
          if (seq !== menu.seq) return;
          menu.waiting = false;
          showMenu([], _("Suggestions are unavailable right now."));
        });
    }, DEBOUNCE_MS);
  }

  function pick(index) {
    const item = menu.items[index];
    const t = field();
    if (!item || !t) return;
    const token = menu.token || activeToken(t.value, t.selectionStart);
    closeMenu();
    if (token) {
      const after = removeToken(t.value, token);
      t.value = after.text;
      t.setSelectionRange(after.cursor, after.cursor);
    }
    if (item.refused) {
      // A folder too large to use: its message, and no chip.
      state.warning = item.warning || "";
      render();
      t.focus();
      return;
    }
    const chip = {
      kind: item.kind === "folder" ? "path" : "file",
      mode: token && token.everything ? "all" : "markdown",
      ref: item.ref,
      name: item.name,
      path: item.path,
      count: item.count || 1,
    };
    if (item.kind === "folder" && item.url) chip.url = item.url;
    addChip(chip);
    state.warning = item.warning || "";
    render();
    t.focus();
  }

  // --- Wiring -----------------------------------------------------------------------------

  function mount() {
    const f = form();
    if (!f || f.dataset.composerMounted) return;
    f.dataset.composerMounted = "true";
    const server = readServerState(f);
    if (!state.loaded) {
      state.selections = server.selections;
      state.excluded = server.excluded;
      state.loaded = true;
    }
    // A fresh form after a question: the chips stay as they are here; a warning the server
    // found (a folder too large, a source gone) replaces ours.
    state.warning = server.warning || state.warning;
    const t = field();
    if (t) {
      t.setAttribute("role", "combobox");
      t.setAttribute("aria-autocomplete", "list");
      t.setAttribute("aria-controls", "mention-list");
      t.setAttribute("aria-expanded", "false");
    }
    menu.open = false;
    render();
  }

  document.addEventListener("input", function (event) {
    if (event.target.matches && event.target.matches("#ask-form textarea")) lookUp();
  });

  document.addEventListener("click", function (event) {
    const target = event.target;
    if (!target.closest) return;
    const remove = target.closest("[data-remove-ref]");
    if (remove && remove.closest("#ask-form")) {
      removeChip(remove.dataset.removeRef);
      state.warning = "";
      render();
      const t = field();
      if (t) t.focus();
      return;
    }
    if (target.matches("#ask-form textarea")) lookUp();
  });

  // Picking with the mouse must not take the focus from the textarea first.
  document.addEventListener("mousedown", function (event) {
    const option = event.target.closest ? event.target.closest("#ask-form .mention-option") : null;
    if (!option) return;
    event.preventDefault();
    pick(Number(option.dataset.index));
  });

  document.addEventListener("focusout", function (event) {
    if (event.target.matches && event.target.matches("#ask-form textarea")) closeMenu();
  });

  document.addEventListener("change", function (event) {
    const box = event.target;
    if (box.matches && box.matches(".source-check[data-source-ref]")) onBoxChange(box);
  });

  // Capture phase at the document: runs before chat.js's Enter-sends handler, so Enter picks
  // a suggestion (or just closes the list) while it is open.
  document.addEventListener(
    "keydown",
    function (event) {
      const t = event.target;
      if (!menu.open || event.isComposing || !t.matches || !t.matches("#ask-form textarea")) {
        if (t.matches && t.matches("#ask-form textarea") && (event.key === "ArrowLeft" || event.key === "ArrowRight")) {
          setTimeout(lookUp, 0); // the cursor moved to or from a token
        }
        // Enter on a mention whose suggestions have not arrived yet waits for them (the next
        // Enter picks one) instead of sending the question with the @token in it.
        if (!event.isComposing && event.key === "Enter" && !event.shiftKey && menu.waiting &&
            t.matches && t.matches("#ask-form textarea")) {
          event.preventDefault();
          event.stopImmediatePropagation();
        }
        return;
      }
      const n = menu.items.length;
      let handled = true;
      if (event.key === "ArrowDown") {
        if (n) menu.active = (menu.active + 1) % n;
        highlight();
      } else if (event.key === "ArrowUp") {
        if (n) menu.active = (menu.active - 1 + n) % n;
        highlight();
      } else if (event.key === "Enter" || (event.key === "Tab" && menu.active >= 0)) {
        if (menu.active >= 0) pick(menu.active);
        else closeMenu();
      } else if (event.key === "Escape") {
        closeMenu();
      } else {
        handled = false;
      }
      if (handled) {
        event.preventDefault();
        event.stopImmediatePropagation();
      }
    },
    true
  );

  // The form is replaced after each question (over the socket, out of band), and source rows
  // come and go (uploads, a PDF turning ready): mount the new form, tick the new boxes.
  let pending = false;
  const observer = new MutationObserver(function (records) {
    if (pending) return;
    const relevant = records.some(function (r) {
      return Array.from(r.addedNodes).some(function (node) {
        return node.nodeType === 1 && (node.id === "ask-form" || node.matches(".source-check") || !!node.querySelector("#ask-form, .source-check"));
      });
    });
    if (!relevant) return;
    pending = true;
    queueMicrotask(function () {
      pending = false;
      mount();
      render();
    });
  });

  document.addEventListener("DOMContentLoaded", function () {
    mount();
    observer.observe(document.body, { childList: true, subtree: true });
  });

  window.NotebookComposer = {
    activeToken: activeToken,
    removeToken: removeToken,
    state: function () {
      return JSON.parse(JSON.stringify({ selections: state.selections, excluded: state.excluded }));
    },
  };
})();
