// Every page: the skip link moves the keyboard focus itself, not only the scroll position, so
// the next key press lands in the page's main input (a page names it in base.html's
// skip_target block). No inline scripts: wired here.
(function () {
  "use strict";

  document.addEventListener("click", function (event) {
    const link = event.target.closest ? event.target.closest("a.skip-link") : null;
    if (!link) return;
    const id = decodeURIComponent((link.getAttribute("href") || "").replace(/^#/, ""));
    const target = id ? document.getElementById(id) : null;
    if (!target) return; // no such element on this page: the browser follows the link as usual
    event.preventDefault();
    if (target.tabIndex < 0 && !target.hasAttribute("tabindex")) {
      target.setAttribute("tabindex", "-1"); // focusable by script, not a tab stop
    }
    target.focus();
  });
})();

// A source's thumbnail that cannot be had (none could be made from the file) is hidden
// rather than shown broken. Error events do not bubble: listened for while capturing.
(function () {
  "use strict";

  document.addEventListener(
    "error",
    function (event) {
      const image = event.target;
      if (image && image.classList && image.classList.contains("source-thumb")) image.hidden = true;
    },
    true
  );
})();
