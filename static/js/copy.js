// Copy buttons: <button data-copy="ID"> copies the value (or text) of the element #ID, and
// says "Copied" in the aria-live element [data-copy-status="ID"]. The Clipboard API needs a
// secure context (HTTPS or localhost); elsewhere the text is selected and copied the old way,
// or left selected for Ctrl+C. Buttons stay hidden until this file runs (they would do nothing
// without it), also in content htmx swaps in later. No inline scripts: wired here.
(function () {
  "use strict";

  // Translations come from Django's JavaScript catalogue (base.html loads /jsi18n/ first);
  // without it the English text is used as it is.
  function gettext(text) {
    return window.gettext ? window.gettext(text) : text;
  }

  function reveal(root) {
    root.querySelectorAll("button[data-copy][hidden]").forEach(function (button) {
      button.hidden = false;
    });
  }

  function say(id, text) {
    const status = document.querySelector('[data-copy-status="' + CSS.escape(id) + '"]');
    if (!status) return;
    // Cleared first so that a second "Copied" is announced again.
    status.textContent = "";
    window.setTimeout(function () {
      status.textContent = text;
    }, 50);
  }

  function selectText(source) {
    if (typeof source.select === "function") {
      source.focus();
      source.select();
      return;
    }
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function fallback(id, source) {
    selectText(source);
    let copied = false;
    try {
      copied = document.execCommand("copy");
    } catch (e) {
      copied = false;
    }
    say(id, copied ? gettext("Copied") : gettext("Selected: press Ctrl+C (⌘C on a Mac) to copy"));
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) return;
    const id = button.getAttribute("data-copy");
    const source = document.getElementById(id);
    if (!source) return;
    const text = "value" in source ? source.value : source.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () {
          say(id, gettext("Copied"));
        },
        function () {
          fallback(id, source);
        }
      );
    } else {
      fallback(id, source);
    }
  });

  document.addEventListener("htmx:load", function (event) {
    reveal(event.target);
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () {
      reveal(document);
    });
  } else {
    reveal(document);
  }
})();
