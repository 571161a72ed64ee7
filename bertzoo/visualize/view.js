(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("attention-data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var svg = $("head-svg");
  var NS = svg.namespaceURI;
  var ROW = 22, TOP = 28, GAP = 150, THUMB = 72, CHAR = 8;
  var state = { group: data.initial.group, layer: data.initial.layer, head: data.initial.head, lines: [], thumbs: [] };

  function group() { return data.groups[state.group]; }
  function matrix() { return group().weights[state.layer][state.head]; }
  function headColour(h, n) { return "hsl(" + Math.round(360 * h / Math.max(n, 1)) + ",70%,38%)"; }
  // White (0) to dark blue (1), linear in the weight: the model view's cells.
  function ramp(a) {
    return "rgb(" + Math.round(255 - 247 * a) + "," + Math.round(255 - 207 * a) + "," + Math.round(255 - 148 * a) + ")";
  }
  function make(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    parent.appendChild(e);
    return e;
  }
  function fill(select, n, label, value) {
    select.innerHTML = "";
    for (var i = 0; i < n; i++) { select.appendChild(new Option(label + " " + i, String(i))); }
    select.value = String(value);
  }
  function width(tokens) {
    var longest = 4;
    tokens.forEach(function (t) { longest = Math.max(longest, t.length); });
    return CHAR * longest + 12;
  }

  function drawHeadView() {
    var g = group(), w = matrix();
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    svg.classList.remove("focus");
    var left = width(g.queries), right = width(g.keys);
    var x1 = left + 6, x2 = left + 6 + GAP;
    var rows = Math.max(g.queries.length, g.keys.length);
    svg.setAttribute("width", left + GAP + right + 12);
    svg.setAttribute("height", TOP + ROW * rows + 8);
    var y = function (i) { return TOP + ROW * i + ROW / 2; };
    make("text", { x: left, y: 14, "text-anchor": "end", "class": "col" }, svg).textContent = "queries";
    make("text", { x: x2 + 6, y: 14, "class": "col" }, svg).textContent = "keys";
    var links = make("g", { stroke: headColour(state.head, g.heads) }, svg);
    state.lines = [];
    for (var i = 0; i < g.queries.length; i++) {
      for (var j = 0; j < g.keys.length; j++) {
        var a = w[i][j];
        if (a < data.min_line) { continue; }
        state.lines.push(make("line", {
          x1: x1, y1: y(i), x2: x2, y2: y(j), "stroke-opacity": a, "class": "link", "data-q": i, "data-k": j
        }, links));
      }
    }
    g.queries.forEach(function (t, i) { token(t, "q", i, left, y(i) + 4, "end"); });
    g.keys.forEach(function (t, j) { token(t, "k", j, x2 + 6, y(j) + 4, "start"); });
    $("status").textContent = "\u00a0";
  }

  function token(text, side, index, x, y, anchor) {
    var t = make("text", { x: x, y: y, "text-anchor": anchor, "class": "tok " + side, "data-i": index }, svg);
    t.textContent = text;
    t.addEventListener("mouseenter", function () { focus(side, index, t); });
    t.addEventListener("mouseleave", unfocus);
  }

  function focus(side, index, element) {
    var g = group(), w = matrix();
    svg.classList.add("focus");
    element.classList.add("active");
    var attr = side === "q" ? "data-q" : "data-k";
    state.lines.forEach(function (line) { line.classList.toggle("on", line.getAttribute(attr) === String(index)); });
    var row = side === "q" ? w[index] : w.map(function (r) { return r[index]; });
    var names = side === "q" ? g.keys : g.queries;
    var order = row.map(function (a, j) { return j; }).sort(function (p, q) { return row[q] - row[p]; });
    var best = order.slice(0, 3).map(function (j) { return names[j] + " " + row[j].toFixed(3); });
    var who = side === "q" ? "query " : "key ";
    var verb = side === "q" ? " attends to: " : " is attended by: ";
    // An empty row or column (XLNet's query stream: a query that sees no token, a key no query sees).
    if (row.every(function (a) { return a === 0; })) {
      verb = side === "q" ? " attends to nothing" : " is attended by nothing";
      best = [];
    }
    $("status").textContent = who + index + " " + (side === "q" ? g.queries : g.keys)[index] + verb + best.join(", ");
  }

  function unfocus() {
    svg.classList.remove("focus");
    svg.querySelectorAll("text.active").forEach(function (t) { t.classList.remove("active"); });
    state.lines.forEach(function (line) { line.classList.remove("on"); });
    $("status").textContent = "\u00a0";
  }

  function drawModelView() {
    var g = group(), grid = $("grid");
    grid.innerHTML = "";
    grid.style.gridTemplateColumns = "auto repeat(" + g.heads + ", auto)";
    grid.appendChild(document.createElement("span"));
    for (var h = 0; h < g.heads; h++) {
      var label = document.createElement("span");
      label.textContent = "head " + h;
      grid.appendChild(label);
    }
    var cell = Math.max(1, Math.floor(THUMB / Math.max(g.queries.length, g.keys.length)));
    state.thumbs = [];
    for (var l = 0; l < g.layers; l++) {
      var name = document.createElement("span");
      name.textContent = "layer " + l;
      grid.appendChild(name);
      for (h = 0; h < g.heads; h++) { grid.appendChild(thumb(g, l, h, cell)); }
    }
    markSelected();
  }

  function thumb(g, l, h, cell) {
    var c = document.createElement("canvas");
    c.width = g.keys.length * cell;
    c.height = g.queries.length * cell;
    c.className = "thumb";
    c.title = "layer " + l + ", head " + h;
    c.setAttribute("data-layer", l);
    c.setAttribute("data-head", h);
    c.setAttribute("data-cell", cell);
    var ctx = c.getContext("2d"), w = g.weights[l][h];
    for (var i = 0; i < g.queries.length; i++) {
      for (var j = 0; j < g.keys.length; j++) {
        ctx.fillStyle = ramp(w[i][j]);
        ctx.fillRect(j * cell, i * cell, cell, cell);
      }
    }
    c.addEventListener("click", function () { select(l, h); });
    state.thumbs.push(c);
    return c;
  }

  function markSelected() {
    state.thumbs.forEach(function (c) {
      var layer = c.getAttribute("data-layer"), head = c.getAttribute("data-head");
      c.classList.toggle("selected", layer === String(state.layer) && head === String(state.head));
    });
  }

  function select(layer, head) {
    state.layer = layer;
    state.head = head;
    $("layer").value = String(layer);
    $("head").value = String(head);
    drawHeadView();
    markSelected();
  }

  function selectGroup(index) {
    state.group = index;
    var g = group();
    state.layer = Math.min(state.layer, g.layers - 1);
    state.head = Math.min(state.head, g.heads - 1);
    fill($("layer"), g.layers, "layer", state.layer);
    fill($("head"), g.heads, "head", state.head);
    var kinds = {
      bidirectional: "bidirectional: every token attends to every token",
      causal: "causal: each token attends to itself and the tokens before it",
      cross: "cross-attention: target tokens (queries) attend to source tokens (keys)",
      "query-stream": "query stream: each position is predicted from the tokens before it in the factorisation " +
        "order, never from its own token"
    };
    $("kind").textContent = g.name + " \u2014 " + (kinds[g.kind] || g.kind);
    $("note").textContent = g.note || "";
    drawModelView();
    drawHeadView();
  }

  var about = "text: \u201c" + data.text + "\u201d";
  if (data.pair !== null) { about += "  pair: \u201c" + data.pair + "\u201d"; }
  if (data.target != null) { about += "  target: \u201c" + data.target + "\u201d"; }
  $("about").textContent = about;
  var groups = $("group");
  data.groups.forEach(function (g, i) { groups.appendChild(new Option(g.name, String(i))); });
  groups.value = String(state.group);
  groups.disabled = data.groups.length < 2;
  groups.addEventListener("change", function () { selectGroup(Number(groups.value)); });
  $("layer").addEventListener("change", function () { select(Number($("layer").value), state.head); });
  $("head").addEventListener("change", function () { select(state.layer, Number($("head").value)); });
  selectGroup(state.group);
  document.body.setAttribute("data-ready", "1");
})();
