// Drag-and-drop and multi-file upload for a note's PDFs, one request per file with its own
// progress bar; the server answers with the row partial, which then polls itself via htmx.
// Also opens and closes the password <dialog>. No inline scripts: everything is wired here.
(function () {
  "use strict";

  // Translations come from Django's JavaScript catalogue (base.html loads /jsi18n/ first);
  // without it the English text is used as it is.
  function gettext(text) {
    return window.gettext ? window.gettext(text) : text;
  }

  function interpolate(format, values) {
    if (window.interpolate) return window.interpolate(format, values, true);
    return format.replace(/%\((\w+)\)s/g, function (_match, name) {
      return String(values[name]);
    });
  }

  function csrfToken(form) {
    const input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function placeholder(file) {
    const row = document.createElement("li");
    row.className = "attachment-row uploading";
    const name = document.createElement("div");
    name.className = "attachment-name";
    name.textContent = file.name; // textContent: a hostile file name stays text
    const bar = document.createElement("progress");
    bar.max = 100;
    bar.value = 0;
    bar.setAttribute("aria-label", interpolate(gettext("Uploading %(name)s"), { name: file.name }));
    const note = document.createElement("small");
    note.className = "muted";
    note.textContent = gettext("Uploading…");
    row.append(name, bar, note);
    return { row, bar, note };
  }

  function replaceWithHtml(row, html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    const nodes = Array.from(template.content.children);
    row.replaceWith(...nodes);
    nodes.forEach(function (node) {
      if (window.htmx) window.htmx.process(node);
    });
  }

  function upload(form, list, file) {
    const empty = document.getElementById("no-attachments");
    if (empty) empty.remove();
    const ui = placeholder(file);
    list.append(ui.row);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-CSRFToken", csrfToken(form));
    xhr.setRequestHeader("X-Upload", "1");
    xhr.upload.addEventListener("progress", function (event) {
      if (event.lengthComputable) ui.bar.value = Math.round((100 * event.loaded) / event.total);
    });
    xhr.addEventListener("load", function () {
      // Only our row fragments go into the page, never an error or login page.
      if (xhr.getResponseHeader("X-Notebook-Fragment") === "attachment-rows") {
        replaceWithHtml(ui.row, xhr.responseText);
        // A dropped file may have made a note (a text file, or a PDF in a note of its own):
        // the workspace's notes pane, and its sources' counts and empty state, listen for
        // these and refresh themselves.
        document.body.dispatchEvent(new CustomEvent("notes-changed"));
        document.body.dispatchEvent(new CustomEvent("sources-changed"));
        return;
      }
      ui.row.classList.add("upload-error");
      if (xhr.status === 401 || xhr.status === 403) {
        ui.note.textContent = gettext("Your session has ended. Reload the page and log in again.");
      } else if (xhr.status === 413) {
        ui.note.textContent = gettext("The file is too large for the server.");
      } else {
        ui.note.textContent = interpolate(gettext("Upload failed (%(status)s). Try again."), {
          status: xhr.status,
        });
      }
    });
    xhr.addEventListener("error", function () {
      ui.note.textContent = gettext("Upload failed: the server could not be reached.");
      ui.row.classList.add("upload-error");
    });
    const data = new FormData();
    data.append("files", file, file.name);
    xhr.send(data);
  }

  function refuseBatch(list, count, limit) {
    const row = document.createElement("li");
    row.className = "attachment-row upload-error";
    row.setAttribute("role", "alert");
    row.dataset.testid = "batch-refused";
    const note = document.createElement("p");
    note.className = "error-text";
    note.textContent = interpolate(
      gettext("%(count)s files at once is too many: add at most %(limit)s files at a time."),
      { count: count, limit: limit }
    );
    const dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.className = "link";
    dismiss.dataset.dismiss = "";
    dismiss.textContent = gettext("Dismiss");
    row.append(note, dismiss);
    list.prepend(row);
  }

  function refuseTooLarge(list, file, maxBytes) {
    const row = document.createElement("li");
    row.className = "attachment-row upload-error";
    row.setAttribute("role", "alert");
    row.dataset.testid = "too-large";
    const note = document.createElement("p");
    note.className = "error-text";
    note.textContent = interpolate(gettext("“%(name)s” is %(size)s MB; the limit is %(limit)s MB."), {
      name: file.name, // textContent: a hostile file name stays text
      size: (file.size / 1048576).toFixed(1),
      limit: Math.floor(maxBytes / 1048576),
    });
    const dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.className = "link";
    dismiss.dataset.dismiss = "";
    dismiss.textContent = gettext("Dismiss");
    row.append(note, dismiss);
    list.prepend(row);
  }

  function initDropzone(zone) {
    const form = zone.querySelector("form");
    const input = zone.querySelector("[data-file-input]");
    const list = document.getElementById(zone.dataset.list);
    const send = function (files) {
      // One drop or choice brings at most data-max-files files (the server's batch limit);
      // beyond it, none is sent and a row says why.
      const limit = parseInt(zone.dataset.maxFiles || "0", 10);
      if (limit > 0 && files.length > limit) {
        refuseBatch(list, files.length, limit);
        return;
      }
      // A file over the size limit (data-max-bytes) is refused here, before any byte is sent.
      const maxBytes = parseInt(zone.dataset.maxBytes || "0", 10);
      Array.from(files).forEach(function (file) {
        if (maxBytes > 0 && file.size > maxBytes) {
          refuseTooLarge(list, file, maxBytes);
          return;
        }
        upload(form, list, file);
      });
    };
    ["dragenter", "dragover"].forEach(function (type) {
      zone.addEventListener(type, function (event) {
        event.preventDefault();
        zone.classList.add("dragging");
      });
    });
    ["dragleave", "drop"].forEach(function (type) {
      zone.addEventListener(type, function () {
        zone.classList.remove("dragging");
      });
    });
    zone.addEventListener("drop", function (event) {
      event.preventDefault();
      if (event.dataTransfer && event.dataTransfer.files.length) send(event.dataTransfer.files);
    });
    input.addEventListener("change", function () {
      send(input.files);
      input.value = "";
    });
  }

  document.addEventListener("click", function (event) {
    const opener = event.target.closest("[data-open-dialog]");
    if (opener) {
      const dialog = document.getElementById(opener.dataset.openDialog);
      if (dialog) {
        event.preventDefault(); // a link to the same thing as a page, for no-script use
        dialog.showModal();
      }
    }
    const closer = event.target.closest("[data-close-dialog]");
    if (closer) closer.closest("dialog").close();
    const dismiss = event.target.closest("[data-dismiss]");
    if (dismiss) dismiss.closest("li").remove();
  });

  function showMarkedDialogs(root) {
    root.querySelectorAll("dialog[data-show]").forEach(function (dialog) {
      if (!dialog.open) dialog.showModal();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-dropzone]").forEach(initDropzone);
    showMarkedDialogs(document);
  });
  // "Add a link": the field empties once the link was taken (its row, or its error, is shown).
  document.addEventListener("htmx:afterRequest", function (event) {
    const form = event.target.closest ? event.target.closest("form[data-reset-after-request]") : null;
    if (form && event.detail.successful && event.detail.xhr.status === 201) form.reset();
  });
  document.addEventListener("htmx:load", function (event) {
    showMarkedDialogs(event.target);
  });
})();
