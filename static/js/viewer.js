// The citation viewer (templates/attachments/_viewer.html): a plain click on a citation link
// that carries data-viewer-file opens the side panel at the cited page, drawn by PDF.js, with
// the quote highlighted on the page's text layer. Everything else is left to the browser:
// Ctrl/Cmd/Shift/Alt or middle clicks open the link as before, and so does every link when
// this file does not run.
//
// - One listener on document (event delegation): answers arrive by WebSocket and HTMX swaps
//   after the page has loaded.
// - PDF.js is imported on the first open only. It runs under the strict CSP: its worker is a
//   module from our origin, no eval (isEvalSupported: false), no WebAssembly (useWasm: false,
//   which would need 'wasm-unsafe-eval'), fonts through the FontFace API, and it sets styles
//   from JS only (allowed), never with <style> elements or style attributes in markup.
// - Quotes, titles and file names are untrusted: they only ever reach the page as textContent.
// - What it says comes from Django's JavaScript catalogue (window.gettext, loaded by base.html)
//   in the page's language; without it, in English.
(function () {
  "use strict";

  const gettext = window.gettext || function (text) { return text; };
  const interpolate =
    window.interpolate ||
    function (format, values) {
      return format.replace(/%\((\w+)\)s/g, function (match, key) {
        return String(values[key]);
      });
    };

  function pageOf(page, pages) {
    return pages
      ? interpolate(gettext("Page %(page)s of %(pages)s"), { page: page, pages: pages }, true)
      : interpolate(gettext("Page %(page)s"), { page: page }, true);
  }

  const NARROW = window.matchMedia("(max-width: 760px)");
  const state = {
    root: null, // the <aside>
    lib: null, // the PDF.js module, once imported
    libPromise: null,
    doc: null, // the open PDFDocumentProxy
    docUrl: "", // the file it is (being) loaded from
    docPromise: null,
    loading: null, // its PDFDocumentLoadingTask
    file: "",
    cited: 0, // the cited page
    page: 0, // the page shown
    pages: 0,
    quote: "",
    opener: null, // the link that opened the panel, to give focus back
    openerKey: null, // how to find it again if an HTMX swap replaced it
    renderTask: null,
    textLayer: null,
    generation: 0, // bumps on every open/turn/close; stale async work checks it and stops
    width: 0,
  };

  function el(role) {
    return state.root.querySelector('[data-viewer-role="' + role + '"]');
  }

  function setStatus(text, kind) {
    const status = el("status");
    status.textContent = text;
    status.dataset.kind = kind || "";
  }

  // --- opening and closing ---------------------------------------------------------------

  document.addEventListener("click", function (event) {
    if (event.defaultPrevented || event.button !== 0) return;
    if (event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
    const link = event.target.closest ? event.target.closest("a[data-viewer-file]") : null;
    if (!link) return;
    const root = document.getElementById("pdf-viewer");
    if (!root) return; // a page without the panel: the link opens the PDF as before
    const page = parseInt(link.dataset.viewerPage, 10);
    if (!link.dataset.viewerFile || !(page > 0)) return;
    event.preventDefault();
    state.root = root;
    open(link, page);
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.defaultPrevented || !isOpen()) return;
    event.preventDefault();
    close();
  });

  document.addEventListener("click", function (event) {
    if (!state.root || !event.target.closest) return;
    const button = event.target.closest("[data-viewer-role]");
    if (!button || !state.root.contains(button)) return;
    const role = button.dataset.viewerRole;
    if (role === "close") close();
    else if (role === "prev") turn(state.page - 1);
    else if (role === "next") turn(state.page + 1);
  });

  function isOpen() {
    return !!state.root && !state.root.hidden;
  }

  function keyOf(link) {
    const article = link.closest("[id]");
    if (!article) return null;
    const links = Array.prototype.slice.call(article.querySelectorAll("a[data-viewer-file]"));
    return { id: article.id, index: links.indexOf(link) };
  }

  function open(link, page) {
    const root = state.root;
    state.opener = link;
    state.openerKey = keyOf(link);
    state.file = link.dataset.viewerFile;
    state.cited = page;
    state.quote = link.dataset.viewerQuote || "";
    el("title").textContent = link.dataset.viewerTitle || "PDF";
    const quote = el("quote");
    quote.textContent = state.quote;
    quote.hidden = !state.quote;
    const text = el("text");
    text.href = link.dataset.viewerText || link.href;
    el("count").textContent = pageOf(page, 0);
    root.dataset.page = String(page);
    root.setAttribute("aria-modal", NARROW.matches ? "true" : "false");
    root.hidden = false;
    document.documentElement.classList.add("pdf-viewer-open");
    root.focus({ preventScroll: true });
    const image = link.dataset.viewerImage === "1";
    root.dataset.kind = image ? "image" : "pdf";
    el("sheet").hidden = image;
    el("figure").hidden = !image;
    const shown = el("image");
    if (shown && !image) shown.remove(); // no <img> in the page but while one is shown
    if (image) showImage();
    else show(page, true);
  }

  // An image source is its one page: shown as an <img> from its download URL, the quote as
  // text under it (an image has no text layer to highlight it in).
  function showImage() {
    state.generation += 1;
    cancelRender();
    state.doc = null;
    state.pages = 1;
    updateControls(1);
    el("open").href = state.file;
    let picture = el("image");
    if (!picture) {
      picture = document.createElement("img");
      picture.className = "pdf-viewer-image";
      picture.dataset.viewerRole = "image";
      picture.dataset.testid = "viewer-image";
      el("figure").prepend(picture);
    }
    const caption = el("image-quote");
    caption.textContent = state.quote;
    caption.hidden = !state.quote;
    el("quote").hidden = true; // shown under the image instead
    setStatus(gettext("Loading the image…"), "busy");
    state.root.setAttribute("aria-busy", "true");
    const generation = state.generation;
    picture.onload = function () {
      if (generation !== state.generation) return;
      state.root.removeAttribute("aria-busy");
      picture.dataset.rendered = "true";
      setStatus(state.quote ? gettext("The quote, as read from the image, is under it.") : "", "");
    };
    picture.onerror = function () {
      if (generation !== state.generation) return;
      state.root.removeAttribute("aria-busy");
      setStatus(
        gettext("The image could not be shown here. Open it in a new tab or read its text instead."),
        "error"
      );
    };
    picture.alt = el("title").textContent;
    delete picture.dataset.rendered;
    picture.src = state.file;
  }

  function close() {
    if (!isOpen()) return;
    state.generation += 1;
    cancelRender();
    state.root.hidden = true;
    document.documentElement.classList.remove("pdf-viewer-open");
    const picture = el("image");
    if (picture) picture.remove();
    let target = state.opener;
    if ((!target || !target.isConnected) && state.openerKey) {
      // The answer was swapped in again (HTMX, the socket) while the panel was open.
      const article = document.getElementById(state.openerKey.id);
      const links = article ? article.querySelectorAll("a[data-viewer-file]") : [];
      target = links[state.openerKey.index] || null;
    }
    if (target && target.isConnected) target.focus();
    state.opener = null;
  }

  function turn(page) {
    if (!state.doc || page < 1 || page > state.pages || page === state.page) return;
    show(page, false);
  }

  // --- PDF.js ---------------------------------------------------------------------------

  function library() {
    if (!state.libPromise) {
      const root = state.root;
      state.libPromise = import(root.dataset.pdfjs).then(function (lib) {
        lib.GlobalWorkerOptions.workerSrc = root.dataset.pdfjsWorker;
        state.lib = lib;
        return lib;
      });
      state.libPromise.catch(function () {
        state.libPromise = null; // let a later click try again
      });
    }
    return state.libPromise;
  }

  function documentFor(lib, url) {
    if (state.docPromise && state.docUrl === url) return state.docPromise;
    if (state.loading) state.loading.destroy(); // and the document it loaded, if any
    state.doc = null;
    const root = state.root;
    const task = lib.getDocument({
      url: url,
      cMapUrl: root.dataset.pdfjsCmaps,
      cMapPacked: true,
      standardFontDataUrl: root.dataset.pdfjsFonts,
      wasmUrl: root.dataset.pdfjsWasm,
      useWasm: false,
      isEvalSupported: false,
      enableXfa: false,
    });
    let locked = false;
    task.onPassword = function () {
      // No password prompt here: the PDF opens in the browser's own viewer for that.
      locked = true;
      task.destroy();
    };
    state.loading = task;
    state.docUrl = url;
    state.docPromise = task.promise.then(
      function (doc) {
        if (state.loading === task) state.doc = doc;
        return doc;
      },
      function (error) {
        if (!locked) throw error;
        const refused = new Error("The PDF needs a password.");
        refused.name = "PasswordException";
        throw refused;
      }
    );
    state.docPromise.catch(function () {
      if (state.loading !== task) return;
      state.loading = null;
      state.docUrl = "";
      state.docPromise = null; // a later click tries again
    });
    return state.docPromise;
  }

  function cancelRender() {
    if (state.renderTask) state.renderTask.cancel();
    if (state.textLayer) state.textLayer.cancel();
    state.renderTask = null;
    state.textLayer = null;
  }

  function show(page, scrollToQuote) {
    const generation = ++state.generation;
    cancelRender();
    setStatus(interpolate(gettext("Loading page %(page)s…"), { page: page }, true), "busy");
    state.root.setAttribute("aria-busy", "true");
    updateControls(page);
    library()
      .then(function (lib) {
        if (generation !== state.generation) return null;
        return documentFor(lib, state.file).then(function (doc) {
          if (generation !== state.generation) return null;
          state.pages = doc.numPages;
          const wanted = Math.min(Math.max(page, 1), doc.numPages);
          return draw(lib, doc, wanted, generation, scrollToQuote);
        });
      })
      .catch(function (error) {
        if (generation !== state.generation) return;
        if (error && error.name === "RenderingCancelledException") return;
        if (error && error.name === "AbortException") return;
        state.root.removeAttribute("aria-busy");
        const password = error && error.name === "PasswordException";
        setStatus(
          password
            ? gettext("This PDF is protected by a password, so it cannot be shown here. Open it in a new tab instead.")
            : gettext("The PDF could not be shown here. Open it in a new tab or read the page text instead."),
          "error"
        );
        if (window.console) console.warn("viewer:", error);
      });
  }

  function updateControls(page) {
    state.page = page;
    state.root.dataset.page = String(page);
    el("count").textContent = pageOf(page, state.pages);
    el("prev").disabled = !state.pages || page <= 1;
    el("next").disabled = !state.pages || page >= state.pages;
    el("open").href = state.file + "#page=" + page;
  }

  function draw(lib, doc, pageNumber, generation, scrollToQuote) {
    return doc.getPage(pageNumber).then(function (page) {
      if (generation !== state.generation) return null;
      updateControls(pageNumber);
      const scroll = el("scroll");
      const sheet = el("sheet");
      const canvas = el("canvas");
      const layer = el("text-layer");
      const padding = window.getComputedStyle(scroll);
      const inner =
        scroll.clientWidth - parseFloat(padding.paddingLeft) - parseFloat(padding.paddingRight);
      const available = Math.max(Math.floor(inner), 120);
      const unscaled = page.getViewport({ scale: 1 });
      const scale = available / unscaled.width;
      const viewport = page.getViewport({ scale: scale });
      const ratio = window.devicePixelRatio || 1;
      state.width = scroll.clientWidth;

      const width = Math.floor(viewport.width);
      const height = Math.floor(viewport.height);
      canvas.width = Math.floor(viewport.width * ratio);
      canvas.height = Math.floor(viewport.height * ratio);
      canvas.style.width = width + "px";
      canvas.style.height = height + "px";
      sheet.style.width = width + "px";
      sheet.style.height = height + "px";
      sheet.style.setProperty("--scale-factor", String(scale));
      sheet.style.setProperty("--user-unit", String(viewport.userUnit || 1));
      sheet.style.setProperty("--total-scale-factor", String(scale * (viewport.userUnit || 1)));
      layer.replaceChildren();
      scroll.scrollTop = 0;

      const renderTask = page.render({
        canvasContext: canvas.getContext("2d"),
        canvas: canvas,
        viewport: viewport,
        transform: ratio !== 1 ? [ratio, 0, 0, ratio, 0, 0] : null,
      });
      state.renderTask = renderTask;
      const textLayer = new lib.TextLayer({
        textContentSource: page.streamTextContent(),
        container: layer,
        viewport: viewport,
      });
      state.textLayer = textLayer;
      return Promise.all([renderTask.promise, textLayer.render()]).then(function () {
        if (generation !== state.generation) return;
        state.renderTask = null;
        state.textLayer = null;
        state.root.removeAttribute("aria-busy");
        sheet.dataset.rendered = "true";
        if (pageNumber !== state.cited || !state.quote) {
          setStatus(
            pageNumber === state.cited
              ? ""
              : interpolate(gettext("The quote is on page %(page)s."), { page: state.cited }, true),
            ""
          );
          return;
        }
        const found = highlight(textLayer.textDivs, textLayer.textContentItemsStr, state.quote);
        if (found === "exact") setStatus(gettext("The quote is highlighted."), "ok");
        else if (found === "partial")
          setStatus(
            gettext("The quote does not match this page exactly; the closest passage is highlighted."),
            "warn"
          );
        else setStatus(gettext("The quote could not be found in this page’s text layer."), "warn");
        if (found && scrollToQuote) reveal(layer.querySelector(".pdf-viewer-highlight"));
      });
    });
  }

  function reveal(span) {
    if (!span) return;
    const scroll = el("scroll");
    const box = scroll.getBoundingClientRect();
    const at = span.getBoundingClientRect();
    scroll.scrollTop += at.top - box.top - scroll.clientHeight / 3;
  }

  // --- finding the quote ------------------------------------------------------------------
  //
  // The quote was taken from the text the server extracted; the text layer holds the same
  // words cut into runs, with other spaces, hyphenation, ligatures, quotation marks and
  // accents (TeX's "sch¨on" for "schön"). Both are reduced to their letters and digits (Unicode
  // NFKD without the combining marks, lower case), so none of that matters, and every reduced
  // character remembers the text-layer run it came from. The
  // quote is looked for as a whole; failing that, its longest stretch that the page holds
  // (the longest common substring: it covers a quote whose end runs onto the next page or
  // whose middle was mangled), if that stretch is long enough to mean something.

  const WORD_CHAR = /[\p{L}\p{N}]/u;
  const CJK = /[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]/;

  function reduce(text, owner, out, owners) {
    for (const ch of text) {
      const folded = ch.normalize("NFKD").toLowerCase();
      for (const c of folded) {
        if (WORD_CHAR.test(c)) {
          out.push(c);
          if (owners) owners.push(owner);
        }
      }
    }
  }

  function longestCommonSubstring(needle, hay) {
    // Dynamic programming over one row: O(needle × hay) steps, a few million at most.
    const n = needle.length;
    let previous = new Uint16Array(n + 1);
    let current = new Uint16Array(n + 1);
    let bestLength = 0;
    let bestEnd = 0;
    for (let j = 1; j <= hay.length; j++) {
      const h = hay[j - 1];
      for (let i = 1; i <= n; i++) {
        if (needle[i - 1] === h) {
          const run = previous[i - 1] + 1;
          current[i] = run;
          if (run > bestLength) {
            bestLength = run;
            bestEnd = j;
          }
        } else {
          current[i] = 0;
        }
      }
      const swap = previous;
      previous = current;
      current = swap;
    }
    return { start: bestEnd - bestLength, length: bestLength };
  }

  // Exposed for the browser test, which checks the matching on its own.
  function locate(items, quote) {
    const hay = [];
    const owners = [];
    items.forEach(function (text, index) {
      reduce(text, index, hay, owners);
    });
    const needleChars = [];
    reduce(quote.slice(0, 4000), 0, needleChars, null);
    if (!needleChars.length || !hay.length) return null;
    const needle = needleChars.join("");
    const haystack = hay.join("");
    let start = haystack.indexOf(needle);
    let length = needle.length;
    let exact = start >= 0;
    if (!exact) {
      const found = longestCommonSubstring(needleChars, hay);
      const minimum = Math.min(needle.length, CJK.test(needle) ? 4 : 12);
      if (found.length < minimum) return null;
      start = found.start;
      length = found.length;
    }
    const runs = new Set();
    for (let k = start; k < start + length; k++) runs.add(owners[k]);
    return { exact: exact, runs: Array.from(runs).sort(function (a, b) { return a - b; }) };
  }

  function highlight(divs, items, quote) {
    const found = locate(items, quote);
    if (!found) return null;
    found.runs.forEach(function (index) {
      const div = divs[index];
      if (div) div.classList.add("pdf-viewer-highlight");
    });
    return found.exact ? "exact" : "partial";
  }

  window.notebookViewer = { locate: locate };

  // --- fit to width ---------------------------------------------------------------------

  if (window.ResizeObserver) {
    let pending = 0;
    const observer = new ResizeObserver(function () {
      if (pending) return;
      pending = window.requestAnimationFrame(function () {
        pending = 0;
        if (!isOpen() || !state.doc) return;
        const width = el("scroll").clientWidth;
        if (Math.abs(width - state.width) > 8) show(state.page, state.page === state.cited);
      });
    });
    const start = function () {
      const root = document.getElementById("pdf-viewer");
      if (root) observer.observe(root);
    };
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
    else start();
  }
})();
