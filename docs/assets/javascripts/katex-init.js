// Typeset the math that pymdownx.arithmatex (generic mode) leaves in the page as \( \) and \[ \].
// KaTeX is served from this site (assets/katex), so the pages need no network to show math.
// document$ is Material's page-load stream: it fires on first load and on every instant navigation.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    // A formula KaTeX cannot parse is reported on the console (the browser test fails on it).
    throwOnError: false,
    errorCallback: (message, error) => console.error(message, error),
  });
});
