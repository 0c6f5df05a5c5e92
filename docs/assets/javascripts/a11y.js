// Names for the controls Material's JavaScript draws without one. A code annotation's marker is
// a link whose only content is a number drawn by CSS, so assistive technology (and axe) finds
// a link with no name. Material adds the markers after load, so new ones are named as they
// appear.
(() => {
  function nameAnnotations(root) {
    for (const link of root.querySelectorAll("a.md-annotation__index:not([aria-label])")) {
      const number = link.querySelector("[data-md-annotation-id]")?.dataset.mdAnnotationId;
      link.setAttribute("aria-label", number ? `Code annotation ${number}` : "Code annotation");
    }
  }

  const observer = new MutationObserver(() => nameAnnotations(document.body));
  document$.subscribe(({ body }) => {
    nameAnnotations(body);
    observer.observe(body, { childList: true, subtree: true });
  });
})();
