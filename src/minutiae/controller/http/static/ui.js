// minutiae web UI: the little the page needs besides htmx (served from /ui/static, no CDN).
// Polls skip while the user types in a form inside the polled part (uiIdle), the map poll
// sends the version it shows (mapVersion: the server answers 204, no swap, when unchanged),
// refusals of actions are shown in #msg, and the header says when the controller is unreachable.
function uiIdle(sel) {
  var a = document.activeElement;
  return !(a && a.closest && a.closest(sel) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName));
}
function mapVersion() {
  var c = document.getElementById("count");
  return c ? c.dataset.v : "";
}
var map = document.getElementById("map");
map.addEventListener("click", function (e) {
  var n = e.target.dataset.n;
  if (n) { htmx.ajax("GET", "/ui/fragments/node/" + encodeURIComponent(n), "#node"); }
});
var WORDS = {"h-healthy": "healthy", "h-unhealthy": "unhealthy", "h-unknown": "unknown",
  "s-drained": "drained", "s-draining": "draining", "s-down": "down",
  "would": "would be drained (dry-run)", "silent": "silent: no fresh report"};
map.addEventListener("mouseover", function (e) {
  var t = e.target;
  if (t.dataset.n) {
    var would = / would\b/.test(t.className);
    var words = t.className.split(" ")
      .map(function (c) { return would && c === "s-drained" ? "" : WORDS[c]; })
      .filter(function (w) { return w; });
    document.getElementById("hover").textContent = t.dataset.n + ": " + words.join(", ");
  }
});
document.body.addEventListener("htmx:beforeSwap", function (e) {
  var x = e.detail.xhr;
  if (x.status < 400) { return; }
  e.detail.isError = false;
  if (x.responseURL.indexOf("/ui/actions/") >= 0) {   // an action refused: say why, keep the page
    document.getElementById("msg").innerHTML = x.responseText;
    e.detail.shouldSwap = false;
  } else {
    e.detail.shouldSwap = true;                        // a view refused: its reason in its place
  }
});
document.body.addEventListener("htmx:afterRequest", function (e) {
  var x = e.detail.xhr;
  if (x && x.status) {
    document.getElementById("offline").classList.remove("on");
    document.body.classList.remove("offline");
  }
  if (x && x.status && x.status < 400 && x.responseURL.indexOf("/ui/actions/") >= 0) {
    document.getElementById("msg").innerHTML = "";
  }
});
document.body.addEventListener("htmx:sendError", function () {
  document.getElementById("offline").classList.add("on");
  document.body.classList.add("offline");     // what the page shows is no longer live
});
