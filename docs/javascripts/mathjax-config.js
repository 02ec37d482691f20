// MathJax 3 settings for pymdownx.arithmatex's generic output: typeset only the .arithmatex
// elements, whose TeX arithmatex wraps in \( \) and \[ \]. The script itself is
// javascripts/mathjax/tex-svg.js, copied from a Python package at build time (docs/hooks/mathjax.py).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
  svg: {
    fontCache: "global",
  },
};
