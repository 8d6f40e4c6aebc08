// The console's only script, loaded from this origin (the pages' Content-Security-Policy
// allows no inline script): a confirmation before destructive buttons, and "select all".
// Without JavaScript every button and box still works, without the confirmation.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-confirm]");
  if (button && !window.confirm(button.getAttribute("data-confirm"))) {
    event.preventDefault();
  }
});
document.addEventListener("change", function (event) {
  if (event.target.id !== "select-all") { return; }
  // Ticks the boxes of this page only.
  document.querySelectorAll('input[name="ids"]').forEach(function (box) { box.checked = event.target.checked; });
});
