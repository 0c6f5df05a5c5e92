// What Material's markup leaves for assistive technology to guess, filled in once the page is
// there (axe and Lighthouse check each of these):
// - a task list's checkbox sits in an empty label: name it after its item's text;
// - a code block, table or formula that scrolls sideways must take keyboard focus, or a
//   keyboard cannot scroll it (on a phone a table scrolls in its own box, extra.css).
// Such a block is also marked `data-scrolls`, for extra.css: a code block that scrolls starts
// below its copy button, and a table says under it that it scrolls. Which ones scroll depends
// on the screen, so this is redone on every resize. A closed fold's blocks are measured when
// it opens: measuring one sooner makes the browser lay out the whole fold, the bulk of a long
// page's load on a phone.
(() => {
  const SCROLLERS =
    "article :is(pre > code, .md-typeset__scrollwrap, table.course-table, .arithmatex, " +
    ".fig-scroll, .highlight-ipynb)";

  function nameCheckboxes(root) {
    for (const box of root.querySelectorAll(".task-list-item input:not([aria-label])")) {
      const words = box.closest(".task-list-item").textContent.trim().replace(/\s+/g, " ");
      box.setAttribute("aria-label", words.slice(0, 120));
    }
  }

  function focusScrollers(root) {
    for (const element of root.querySelectorAll(SCROLLERS)) {
      if (element.closest("details:not([open])")) continue;
      const scrolls = element.scrollWidth > element.clientWidth + 1;
      if (scrolls !== element.hasAttribute("data-scrolls")) {
        element.toggleAttribute("data-scrolls", scrolls);
      }
      if (scrolls && !element.hasAttribute("tabindex")) {
        element.setAttribute("tabindex", "0");
        element.dataset.a11yFocus = "";
      } else if (!scrolls && "a11yFocus" in element.dataset) {
        element.removeAttribute("tabindex");
        delete element.dataset.a11yFocus;
      }
    }
  }

  // Material mounts a code block once it comes into view (content.lazy) and then makes it
  // focusable only where the screen has hover, taking away what focusScrollers gave it.
  function keepFocus(changes) {
    for (const { target } of changes) {
      if ("a11yFocus" in target.dataset && !target.hasAttribute("tabindex")) {
        target.setAttribute("tabindex", "0");
      }
    }
  }

  function fill(root) {
    nameCheckboxes(root);
    focusScrollers(root);
  }

  const focusKeeper = new MutationObserver(keepFocus);
  document$.subscribe(({ body }) => {
    fill(body);
    focusKeeper.observe(body, { attributeFilter: ["tabindex"], subtree: true });
  });
  window.addEventListener("resize", () => focusScrollers(document.body));
  // "toggle" does not bubble, so it is caught on its way down.
  document.addEventListener("toggle", ({ target }) => target.open && focusScrollers(target), true);
})();
