// Colour theme: "system" (the default: follows prefers-color-scheme), "light" or "dark", kept in
// localStorage. Loaded in <head> without defer so that <html data-theme> is set before the
// first paint (no flash of the wrong theme); app.css does the rest. No inline scripts: the
// picker in the header (templates/_theme_picker.html) is wired here once the page is parsed.
(function () {
  "use strict";

  const KEY = "notebook-theme";
  const CHOICES = ["system", "light", "dark"];
  const root = document.documentElement;

  function stored() {
    try {
      const value = window.localStorage.getItem(KEY);
      return CHOICES.indexOf(value) === -1 ? "system" : value;
    } catch (e) {
      return "system"; // storage refused (privacy settings): follow the system
    }
  }

  function apply(choice) {
    if (choice === "system") root.removeAttribute("data-theme");
    else root.setAttribute("data-theme", choice);
  }

  function save(choice) {
    try {
      if (choice === "system") window.localStorage.removeItem(KEY);
      else window.localStorage.setItem(KEY, choice);
    } catch (e) {
      // Not kept past this page, but applied all the same.
    }
  }

  apply(stored());

  function wire() {
    document.querySelectorAll("[data-theme-picker]").forEach(function (picker) {
      const select = picker.querySelector("select");
      if (!select) return;
      select.value = stored();
      select.addEventListener("change", function () {
        const choice = CHOICES.indexOf(select.value) === -1 ? "system" : select.value;
        save(choice);
        apply(choice);
      });
      picker.hidden = false;
    });
  }

  // Another tab changed the theme: follow it.
  window.addEventListener("storage", function (event) {
    if (event.key !== KEY) return;
    const choice = stored();
    apply(choice);
    document.querySelectorAll("[data-theme-picker] select").forEach(function (select) {
      select.value = choice;
    });
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wire);
  else wire();
})();
