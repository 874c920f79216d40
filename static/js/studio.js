// Studio output pages: the audio overview's player and transcript (a line's time plays from
// there), the mind map (a WAI-ARIA tree: arrow keys move and open or close,
// Enter asks the chat about a node; expand/collapse all; zoom; drag to pan) and the quiz
// (check and score in the page). Flashcards turn over as <details>, without script. Source
// text reaches the page escaped by the server: nothing here builds markup from it.
(function () {
  "use strict";

  const _ = window.gettext || function (s) { return s; };
  const interpolate = window.interpolate || function (s) { return s; };

  // --- Mind map -----------------------------------------------------------------------
  function items(tree) {
    // The tree items a reader can reach: those not inside a collapsed item.
    return Array.prototype.filter.call(tree.querySelectorAll("[role=treeitem]"), function (li) {
      let up = li.parentElement.closest("[role=treeitem]");
      while (up) {
        if (up.getAttribute("aria-expanded") === "false") return false;
        up = up.parentElement.closest("[role=treeitem]");
      }
      return true;
    });
  }

  function focusItem(tree, li) {
    tree.querySelectorAll("[role=treeitem]").forEach(function (other) { other.tabIndex = -1; });
    li.tabIndex = 0;
    li.focus();
  }

  function setOpen(li, open) {
    if (li.hasAttribute("aria-expanded")) li.setAttribute("aria-expanded", open ? "true" : "false");
  }

  function ask(map, li) {
    const button = li.querySelector(":scope > .map-label [data-map-question]");
    const form = map.querySelector("[data-map-ask]");
    if (!button || !form) return;
    form.querySelector("[name=content]").value = button.dataset.mapQuestion;
    form.submit();
  }

  function wireMap(map) {
    const tree = map.querySelector("[data-map-tree]");
    const canvas = map.querySelector("[data-map-canvas]");
    let scale = 1;
    const first = tree.querySelector("[role=treeitem]");
    if (first) first.tabIndex = 0;

    map.addEventListener("click", function (event) {
      const tool = event.target.closest("[data-map]");
      if (tool) {
        const what = tool.dataset.map;
        if (what === "expand" || what === "collapse") {
          tree.querySelectorAll("[aria-expanded]").forEach(function (li) { setOpen(li, what === "expand"); });
        } else {
          scale = Math.min(2, Math.max(0.5, scale + (what === "zoom-in" ? 0.15 : -0.15)));
          tree.style.fontSize = scale + "em";
        }
        return;
      }
      const toggle = event.target.closest("[data-map-toggle]");
      if (toggle) {
        const li = toggle.closest("[role=treeitem]");
        setOpen(li, li.getAttribute("aria-expanded") === "false");
        return;
      }
      const question = event.target.closest("[data-map-question]");
      if (question) ask(map, question.closest("[role=treeitem]"));
    });

    tree.addEventListener("keydown", function (event) {
      const li = event.target.closest("[role=treeitem]");
      if (!li || event.target !== li) return;
      const all = items(tree);
      const at = all.indexOf(li);
      const open = li.getAttribute("aria-expanded");
      let handled = true;
      if (event.key === "ArrowDown" && at < all.length - 1) focusItem(tree, all[at + 1]);
      else if (event.key === "ArrowUp" && at > 0) focusItem(tree, all[at - 1]);
      else if (event.key === "Home") focusItem(tree, all[0]);
      else if (event.key === "End") focusItem(tree, all[all.length - 1]);
      else if (event.key === "ArrowRight") {
        if (open === "false") setOpen(li, true);
        else if (open === "true") focusItem(tree, li.querySelector("[role=treeitem]"));
      } else if (event.key === "ArrowLeft") {
        if (open === "true") setOpen(li, false);
        else {
          const parent = li.parentElement.closest("[role=treeitem]");
          if (parent) focusItem(tree, parent);
        }
      } else if (event.key === "Enter") {
        const link = li.querySelector(":scope > .map-label a.cite-chip");
        if (event.shiftKey && link) link.click();
        else ask(map, li);
      } else handled = false;
      if (handled) event.preventDefault();
    });

    // Drag to pan (mouse, pen, touch): the canvas scrolls; a click on a link stays a click.
    let drag = null;
    canvas.addEventListener("pointerdown", function (event) {
      if (event.target.closest("a, button")) return;
      drag = { x: event.clientX, y: event.clientY, left: canvas.scrollLeft, top: canvas.scrollTop };
      canvas.setPointerCapture(event.pointerId);
    });
    canvas.addEventListener("pointermove", function (event) {
      if (!drag) return;
      canvas.scrollLeft = drag.left - (event.clientX - drag.x);
      canvas.scrollTop = drag.top - (event.clientY - drag.y);
    });
    ["pointerup", "pointercancel"].forEach(function (name) {
      canvas.addEventListener(name, function () { drag = null; });
    });
  }

  // --- Quiz ---------------------------------------------------------------------------
  function wireQuiz(quiz) {
    quiz.addEventListener("submit", function (event) { event.preventDefault(); });
    const check = quiz.querySelector("[data-quiz-check]");
    if (!check) return;
    check.addEventListener("click", function () {
      const questions = quiz.querySelectorAll("fieldset[data-answer]");
      let right = 0;
      questions.forEach(function (q) {
        const chosen = q.querySelector("input:checked");
        const verdict = q.querySelector("[data-verdict]");
        const correct = chosen && chosen.value === q.dataset.answer;
        if (correct) right += 1;
        q.dataset.result = chosen ? (correct ? "right" : "wrong") : "open";
        const answer = q.querySelectorAll("label.quiz-option")[Number(q.dataset.answer)];
        q.querySelectorAll("label.quiz-option").forEach(function (l) { l.classList.toggle("is-answer", l === answer); });
        verdict.textContent = !chosen ? _("Not answered.") : correct ? _("Right.") : _("Not quite: the answer is marked.");
        if (chosen && !correct) q.querySelector("details.quiz-why").open = true;
      });
      quiz.querySelector("[data-quiz-score]").textContent = interpolate(_("%(right)s of %(total)s right."), { right: right, total: questions.length }, true);
    });
  }

  // --- Audio overview: a line's time plays from there; the line being spoken is marked.
  function wireAudio(box) {
    const player = box.querySelector("[data-audio-player]");
    const lines = Array.prototype.slice.call(box.querySelectorAll(".transcript-line"));
    if (!player) return;
    box.addEventListener("click", function (event) {
      const seek = event.target.closest("[data-seek]");
      if (!seek) return;
      player.currentTime = Number(seek.dataset.seek) || 0;
      const playing = player.play();
      if (playing && playing.catch) playing.catch(function () {});
    });
    player.addEventListener("timeupdate", function () {
      const now = player.currentTime;
      lines.forEach(function (line) {
        const on = now >= Number(line.dataset.start) && now < Number(line.dataset.end) + 0.4;
        if (on) line.setAttribute("aria-current", "true");
        else line.removeAttribute("aria-current");
      });
    });
  }

  function wire(root) {
    root.querySelectorAll("[data-audio-overview]:not([data-wired])").forEach(function (box) {
      box.setAttribute("data-wired", "");
      wireAudio(box);
    });
    root.querySelectorAll("[data-mind-map]:not([data-wired])").forEach(function (map) {
      map.setAttribute("data-wired", "");
      wireMap(map);
    });
    root.querySelectorAll("[data-quiz]:not([data-wired])").forEach(function (quiz) {
      quiz.setAttribute("data-wired", "");
      wireQuiz(quiz);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", function () { wire(document); });
  else wire(document);
})();
