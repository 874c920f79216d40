// The PDF.js worker for the citation viewer (static/js/viewer.js): the vendored worker, plus a
// report of any Content-Security-Policy violation inside it. The browser fires those only at
// the worker itself, so without this they would pass unnoticed (the browser tests watch the
// console). The import is hoisted: the listener is in place before PDF.js handles a message.
import "../vendor/pdfjs-dist/build/pdf.worker.min.mjs";

self.addEventListener("securitypolicyviolation", function (event) {
  console.error(
    "Content Security Policy: the PDF worker was refused " +
      (event.blockedURI || "inline code") +
      " by " +
      event.violatedDirective
  );
});
