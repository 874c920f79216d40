// The split view (templates/intelligence/split.html): open the document in the PDF.js panel
// as soon as the page loads; without JavaScript the link opens the PDF itself.
(function () {
  "use strict";
  const start = function () {
    const link = document.querySelector("a[data-split-open]");
    if (link) link.click();
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
