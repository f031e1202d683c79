// The answer filters: all, failed, false alarms (labelled faithful, failed), misses (labelled hallucinated,
// passed). The page works without it: every answer is shown.
(function () {
  "use strict";
  var buttons = Array.prototype.slice.call(document.querySelectorAll("#answers .filters button"));
  var answers = Array.prototype.slice.call(document.querySelectorAll("#answers article.answer"));
  var shown = document.getElementById("shown");

  function matches(answer, filter) {
    if (filter === "all") return true;
    if (filter === "failed") return answer.getAttribute("data-failed") === "true";
    return answer.getAttribute("data-kind") === filter;
  }

  function apply(filter) {
    var visible = 0;
    answers.forEach(function (answer) {
      var keep = matches(answer, filter);
      answer.hidden = !keep;
      if (keep) visible += 1;
    });
    buttons.forEach(function (button) {
      button.setAttribute("aria-pressed", String(button.getAttribute("data-filter") === filter));
    });
    if (shown) shown.textContent = "Showing " + visible + " of the " + answers.length + " answers listed.";
  }

  buttons.forEach(function (button) {
    button.addEventListener("click", function () {
      apply(button.getAttribute("data-filter"));
    });
  });
  apply("all");
})();
