// The conversation page. htmx's ws extension does the talking (forms with ws-send go over the
// socket, the server answers with out-of-band partials); this file only decides when the
// plain fallbacks apply. No inline scripts: everything is wired here.
//
// - While the socket is down, forms submit as ordinary posts and answers being written poll
//   their partial every second. While it is up, polls are skipped unless the socket has been
//   quiet for a while (an event lost on the way is then healed from the database).
// - When the socket (re)opens, answers being written are fetched once, so the page catches up
//   with whatever was written between the page load (or the disconnect) and now.
// - Enter sends the question; Shift+Enter starts a new line.
(function () {
  "use strict";

  const QUIET_MS = 3000;
  let lastEvent = 0;

  function chat() {
    return document.getElementById("chat");
  }

  function socketOpen() {
    const root = chat();
    return !!root && root.dataset.socket === "open";
  }

  document.addEventListener("htmx:wsOpen", function (event) {
    const root = event.target.closest ? event.target.closest("#chat") : null;
    if (!root) return;
    root.dataset.socket = "open";
    lastEvent = Date.now();
    root.querySelectorAll("[data-poll]").forEach(function (message) {
      window.htmx.trigger(message, "chat:refresh");
    });
  });

  document.addEventListener("htmx:wsClose", function (event) {
    const root = event.target.closest ? event.target.closest("#chat") : null;
    if (root) root.dataset.socket = "closed";
  });

  // After the user sends a question: the question and its answer scroll into view as they
  // arrive, and focus goes back to the composer (the form is replaced by a fresh one).
  let justSent = false;
  let following = null; // the question whose answer the page follows as it streams

  ["wheel", "touchmove", "keydown"].forEach(function (kind) {
    window.addEventListener(kind, function () { following = null; }, { passive: true });
  });

  function composer() {
    return document.querySelector("#ask-form textarea");
  }

  function listScrolls(list) {
    return list.scrollHeight > list.clientHeight && getComputedStyle(list).overflowY !== "visible";
  }

  // Where the page itself scrolls (a phone), the composer is sticky at the bottom of the
  // screen: an element just scrolled into view at the end is moved up from behind it.
  function clearOfComposer(element) {
    const form = document.getElementById("ask-form");
    if (!form || getComputedStyle(form).position !== "sticky") return;
    const hidden = element.getBoundingClientRect().bottom - form.getBoundingClientRect().top + 8;
    if (hidden > 0) window.scrollBy(0, hidden);
  }

  document.addEventListener("htmx:wsAfterMessage", function (event) {
    lastEvent = Date.now();
    const message = event.detail && event.detail.message;
    if (typeof message === "string" && message.indexOf('id="message-list"') !== -1) {
      // The question just asked goes to the top, its answer streams in below it. (Its end
      // at the bottom would sit behind the composer where the page itself scrolls, on a
      // phone, the composer being sticky there.)
      const asked = document.querySelectorAll("#message-list .message-user");
      following = asked.length ? asked[asked.length - 1] : null;
      if (following) following.scrollIntoView({ block: "start", behavior: "smooth" });
    } else if (following && document.contains(following)) {
      // While its answer grows, the page follows (until the user scrolls themselves).
      following.scrollIntoView({ block: "start" });
      const answer = following.nextElementSibling;
      const status = answer ? answer.getAttribute("data-status") : "";
      if (status !== "pending" && status !== "streaming") following = null; // done or failed
    }
    if (justSent && typeof message === "string" && message.indexOf('id="ask-form"') !== -1) {
      justSent = false;
      const field = composer();
      if (field) field.focus({ preventScroll: true });
    }
  });

  document.addEventListener("htmx:wsConfigSend", function (event) {
    const elt = event.detail && event.detail.elt;
    if (!elt || elt.id !== "ask-form") return;
    justSent = true;
    // The address may name an earlier answer (#message-…): a reload should open at the end.
    if (window.location.hash) {
      history.replaceState(null, "", window.location.pathname + window.location.search);
    }
  });

  // A conversation opens at its end (or at the message the address names): its newest
  // messages are what the user came back for.
  document.addEventListener("DOMContentLoaded", function () {
    const list = document.getElementById("message-list");
    if (!list) return;
    const target = window.location.hash ? document.getElementById(window.location.hash.slice(1)) : null;
    const anchor = target && list.contains(target) ? target : list.lastElementChild;
    if (!anchor) return;
    if (listScrolls(list)) {
      list.scrollTop = target ? anchor.offsetTop - list.offsetTop : list.scrollHeight;
    } else {
      anchor.scrollIntoView({ block: target ? "start" : "end" });
      if (!target) clearOfComposer(anchor);
    }
  });

  document.addEventListener("htmx:beforeRequest", function (event) {
    const elt = event.detail && event.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) return;
    const trigger = event.detail.requestConfig && event.detail.requestConfig.triggeringEvent;
    if (trigger && trigger.type === "chat:refresh") return;
    if (socketOpen() && Date.now() - lastEvent < QUIET_MS) event.preventDefault();
  });

  // Runs before the ws extension's own submit handler (capture phase, at the document): with
  // the socket down, let the browser post the form instead of queueing it for a socket that
  // may never open.
  document.addEventListener(
    "submit",
    function (event) {
      const form = event.target;
      if (!form.hasAttribute || !form.hasAttribute("ws-send") || socketOpen()) return;
      event.stopImmediatePropagation();
    },
    true
  );

  document.addEventListener("keydown", function (event) {
    const field = event.target;
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (!field.matches || !field.matches("#ask-form textarea")) return;
    event.preventDefault();
    if (field.value.trim()) field.form.requestSubmit();
  });
})();
