// The Outbox operator console (app/api/console.py). Plain JavaScript, no build step: it calls
// the public HTTP API only (with the credential its user signs in with) and draws with uPlot.
"use strict";

(() => {
  const main = document.getElementById("main");
  const banner = document.getElementById("banner");
  const CREDENTIAL = "outbox.console.credential";
  const POLL_MS = 2000;
  const LAG_SPAN_S = 300; // a group's lag: the last 5 minutes, kept by the service and read by the page
  const LAG_POINTS = LAG_SPAN_S * 1000 / POLL_MS;
  let timers = [];
  let charts = [];
  // Known once a request without a credential was answered (authentication off).
  let servesWithoutCredentials = false;
  // Bumped by every route(): an answer that arrives after the page changed is dropped.
  let shown = 0;

  // --- the API ---------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, body) {
      super(body && body.message ? body.message : `HTTP ${status}`);
      this.status = status;
      this.code = body && body.error_code ? body.error_code : `HTTP_${status}`;
    }
  }

  async function api(path, options = {}) {
    const headers = { accept: "application/json", ...(options.headers || {}) };
    const credential = sessionStorage.getItem(CREDENTIAL);
    if (credential) headers.authorization = `Bearer ${credential}`;
    if (options.json !== undefined) headers["content-type"] = "application/json";
    // Relative to the page (…/console), so that behind a proxy that serves the service under
    // a prefix the calls keep it.
    const response = await fetch(path.replace(/^\//, ""), {
      method: options.method || "GET", headers,
      body: options.json !== undefined ? JSON.stringify(options.json) : undefined,
    });
    const text = await response.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (e) { body = { message: text.slice(0, 300) }; }
    if (response.status === 401) {
      askForCredentials(body && body.message);
      throw new ApiError(401, body);
    }
    if (!response.ok) throw new ApiError(response.status, body);
    return options.text ? text : body;
  }

  // The operations the principal may do on the cluster (GET /v1/cluster/authorized-operations;
  // none where it may not describe it): the pages offer an operator's action only with alter.
  const clusterOperations = async () => (await api("/v1/cluster/authorized-operations")).authorized_operations;
  // Whether the API's lists are whole for the principal, so that an empty one means there is
  // none: describe on the cluster lists every group (Kafka's ListGroups), and marks an operator,
  // who is granted describe on every transactional id with it (README's read-only operator).
  // Without it the lists hold what the principal may describe only (a refusal of the others
  // would tell they exist): the pages say "you may describe", never that there is none.
  const listsAreWhole = async () => (await clusterOperations()).includes("describe");

  // --- sign in ----------------------------------------------------------------------------

  const dialog = document.getElementById("sign-in");
  function askForCredentials(reason) {
    // Every refused request is an audited authentication failure: a page left at the sign-in
    // must not poll on, adding one every POLL_MS. Signing in draws the page again.
    for (const t of timers) clearInterval(t);
    timers = [];
    const error = document.getElementById("sign-in-error");
    const had = sessionStorage.getItem(CREDENTIAL);
    error.hidden = !had;
    error.textContent = had ? `Not accepted: ${reason || "the credential was refused"}` : "";
    if (!dialog.open) dialog.showModal();
  }
  document.getElementById("sign-in-form").addEventListener("submit", () => {
    sessionStorage.setItem(CREDENTIAL, document.getElementById("credential").value.trim());
    document.getElementById("credential").value = "";
    route();
  });
  document.getElementById("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(CREDENTIAL);
    route();
  });

  // --- helpers ----------------------------------------------------------------------------

  function h(tag, attrs = {}, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "class") el.className = v;
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function table(headers, rows, empty = "Nothing here.") {
    if (!rows.length) return h("p", { class: "muted" }, empty);
    return h("table", {},
      h("thead", {}, h("tr", {}, headers.map(x => h("th", {}, x)))),
      h("tbody", {}, rows.map(r => h("tr", {}, r.map(c => h("td", {}, c))))));
  }

  const fmt = new Intl.NumberFormat("en");
  const n = x => (x === null || x === undefined ? "–" : fmt.format(x));
  function age(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return `${ms} ms`;
    if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
    if (ms < 7200000) return `${Math.round(ms / 60000)} min`;
    if (ms < 172800000) return `${(ms / 3600000).toFixed(1)} h`;
    return `${+(ms / 86400000).toFixed(1)} days`;
  }
  function bytes(b) {
    if (b < 1024) return `${b} B`;
    if (b < 1048576) return `${(b / 1024).toFixed(1)} KiB`;
    return `${(b / 1048576).toFixed(1)} MiB`;
  }
  const link = (href, text) => h("a", { href }, text);
  const enc = encodeURIComponent;
  const badge = (text, kind) => h("span", { class: `badge ${kind || text}` }, text);

  function showError(e, what) {
    banner.hidden = false;
    banner.className = "error";
    banner.textContent = e instanceof ApiError
      ? `${what}: ${e.code} — ${e.message}`
      : `${what}: ${e && e.message ? e.message : e}`;
  }
  function showNotice(text) {
    banner.hidden = false;
    banner.className = "notice";
    banner.textContent = text;
  }

  // Go to a page and show a notice once it is drawn (route() clears the banner first).
  let pendingNotice = null;
  function go(hash, notice) {
    pendingNotice = notice;
    if (location.hash === hash) route(); else location.hash = hash;
  }

  function every(ms, fn, now = true) {
    if (now) fn();
    timers.push(setInterval(fn, ms));
  }

  // Time axis labels: the time of day, local, as the operator's clock reads it; seconds only
  // where ticks are less than a minute apart; the date only where the chart spans more than
  // one day (uPlot's default puts a date on the first tick, and on an empty chart a wrong one).
  const pad2 = x => String(x).padStart(2, "0");
  const timeOfDay = (d, seconds) => `${pad2(d.getHours())}:${pad2(d.getMinutes())}${seconds ? `:${pad2(d.getSeconds())}` : ""}`;
  const dateAndTime = d => `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${timeOfDay(d, true)}`;
  function timeTicks(u, splits, axisIdx, space, incr) {
    const oneDay = new Date(u.scales.x.min * 1000).toDateString() === new Date(u.scales.x.max * 1000).toDateString();
    return splits.map(t => {
      const d = new Date(t * 1000);
      return oneDay ? timeOfDay(d, incr < 60) : `${d.getMonth() + 1}/${d.getDate()} ${timeOfDay(d, false)}`;
    });
  }
  const compact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 1 });
  const CHART_HEIGHT = 220;
  const COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c"];

  // A chart of values over time, as wide as its card (it follows the card's width), its time
  // axis ending at the newest point (or now) and as long as its points span, from a minute
  // (so that a few points are not one sliver) up to `spanS` seconds: an empty chart says "No
  // data yet" over the last minute's correct times, or why it is empty where its caller knows
  // (set's `emptyText`). Its accessible label names the ticks shown.
  // Its series take the palette's colours in order, unless `colours` names each one's.
  const MIN_SPAN_S = 60;
  function timeChart(card, title, seriesLabels, spanS, colours = seriesLabels.map((_, i) => COLOURS[i % COLOURS.length])) {
    const inner = h("div", { class: "chart-inner" });
    const empty = h("div", { class: "chart-empty" }, "No data yet");
    card.classList.add("chart");
    card.replaceChildren(inner, empty);
    card.setAttribute("role", "img");
    let data = [[], ...seriesLabels.map(() => [])];
    const plot = new uPlot({
      title, width: Math.max(200, inner.clientWidth), height: CHART_HEIGHT,
      scales: {
        x: { time: true, range: () => {
          const end = data[0].length ? data[0][data[0].length - 1] : Date.now() / 1000;
          const extent = data[0].length ? end - data[0][0] : 0;
          return [end - Math.min(spanS, Math.max(MIN_SPAN_S, extent)), end];
        } },
        y: { range: (u, min, max) => [0, Math.max(1, (Number.isFinite(max) ? max : 0) * 1.1)] },
      },
      series: [{ value: (u, v) => (v === null ? "–" : dateAndTime(new Date(v * 1000))) },
        ...seriesLabels.map((label, i) => ({ label, stroke: colours[i], width: 2,
          value: (u, v) => (v === null ? "–" : n(Math.round(v * 10) / 10)) }))],
      axes: [
        { space: 90, values: (u, splits, axisIdx, space, incr) => {
          const ticks = timeTicks(u, splits, axisIdx, space, incr);
          card.setAttribute("aria-label", `${title}; time axis: ${ticks.join(", ")}`);
          return ticks;
        } },
        { size: 60, values: (u, splits) => splits.map(v => compact.format(v)) },
      ],
    }, data, inner);
    const resized = new ResizeObserver(() => {
      const width = Math.max(200, inner.clientWidth);
      if (width !== plot.width) plot.setSize({ width, height: CHART_HEIGHT });
    });
    resized.observe(inner);
    const c = {
      set(next, emptyText = "No data yet") {
        data = next;
        card.dataset.points = String(next[0].length);  // how many times are plotted, for a test to read
        empty.textContent = emptyText;
        empty.hidden = next.slice(1).some(series => series.some(v => v !== null && v !== undefined));
        plot.setData(next);
      },
      destroy() { resized.disconnect(); plot.destroy(); },
    };
    charts.push(c);
    return c;
  }

  // --- pages ------------------------------------------------------------------------------

  // The rates are the service's own history (GET /v1/console/history, kept by the process):
  // loaded whole when the page opens, then only what is newer, every poll.
  const RATE_KEYS = ["records_produced_per_s", "records_fetched_per_s", "transactions_committed_per_s",
    "transactions_aborted_per_s"];

  async function overview() {
    const page = shown;
    const whole = await listsAreWhole();
    if (page !== shown) return;
    main.replaceChildren(
      h("h1", {}, "Overview"),
      h("div", { id: "counts", class: "counts" }),
      h("p", { id: "rates-about", class: "muted" }, "Rates of the process this console talks to, since it started."),
      h("p", { id: "rates-now", class: "muted" }, "Loading…"),
      h("div", { id: "rates" }), h("div", { id: "outcomes" }),
      h("h2", {}, "Lag of the groups that lag most"),
      h("p", { id: "lag-history-about", class: "muted" }, "Loading…"),
      h("p", { id: "lag-history-now", class: "muted" }),
      h("div", { id: "lag-history" }),
      h("h2", {}, "Hanging transactions"), h("div", { id: "hanging" }));
    overviewCounts(whole);
    lagHistory(shown);
    let rates = null;
    let outcomes = null;
    let samples = [];
    let windowMs = 0;
    const load = async () => {
      const after = samples.length ? samples[samples.length - 1].time_ms : null;
      let got;
      try {
        got = await api(`/v1/console/history${after === null ? "" : `?since_ms=${after}`}`);
        if (page !== shown) return false;
      } catch (e) {
        if (page !== shown) return false;
        if (e.status === 403) {
          document.getElementById("rates-now").textContent = "Rates need describe on the cluster.";
        } else if (e.status !== 401) showError(e, "Rates");
        return false;
      }
      if (!rates) {
        windowMs = got.window_ms;
        document.getElementById("rates-about").textContent = "Rates of the process this console talks to, " +
          `since it started, over the last ${age(got.window_ms)} (a sample every ${age(got.interval_ms)}).`;
        rates = timeChart(document.getElementById("rates"), "Records per second", ["produced", "fetched"], windowMs / 1000);
        outcomes = timeChart(document.getElementById("outcomes"), "Transactions ended per second",
          ["committed", "aborted"], windowMs / 1000);
      }
      samples = samples.concat(got.samples);
      const newest = samples.length ? samples[samples.length - 1].time_ms : 0;
      samples = samples.filter(x => x.time_ms > newest - windowMs);
      const t = samples.map(x => x.time_ms / 1000);
      const column = k => samples.map(x => x[k]);
      rates.set([t, column(RATE_KEYS[0]), column(RATE_KEYS[1])]);
      outcomes.set([t, column(RATE_KEYS[2]), column(RATE_KEYS[3])]);
      const last = samples[samples.length - 1];
      document.getElementById("rates-now").replaceChildren(...(last ? [
        `Last sample (${timeOfDay(new Date(last.time_ms), true)}): `,
        h("strong", { id: "produced-rate" }, n(Math.round(last.records_produced_per_s))), " records/s produced, ",
        h("strong", { id: "fetched-rate" }, n(Math.round(last.records_fetched_per_s))), " fetched; ",
        n(Math.round(last.transactions_committed_per_s * 10) / 10), " transactions/s committed, ",
        n(Math.round(last.transactions_aborted_per_s * 10) / 10), " aborted. Peak of the window: ",
        h("strong", { id: "produced-peak" }, n(Math.round(Math.max(...column(RATE_KEYS[0]))))), " produced, ",
        h("strong", { id: "fetched-peak" }, n(Math.round(Math.max(...column(RATE_KEYS[1]))))), " fetched."]
        : ["No sample yet."]));
      return true;
    };
    if (await load()) every(POLL_MS, load, false);
    try {
      const hanging = (await api("/v1/transactions?hanging=true")).transactions;
      if (page !== shown) return;
      document.getElementById("hanging").replaceChildren(table(
        ["transactional id", "state", "age"],
        hanging.map(t => [link(`#/transactions/${enc(t.transactional_id)}`, t.transactional_id), badge(t.state), age(t.age_ms)]),
        whole ? "None: every transaction is ending within its timeout." : "None you may describe."));
    } catch (e) { if (page === shown && e.status !== 401) showError(e, "Hanging transactions"); }
  }

  // The groups' lag over time is the service's own history too (GET /v1/console/lag-history:
  // every sample holds the groups that lagged most then, as many as the service keeps). The
  // chart plots the LAG_GROUPS_SHOWN that lag most in the newest sample, over the whole window;
  // an unknown total (a partition without a committed offset) is a gap, not a 0.
  const LAG_GROUPS_SHOWN = 5;

  // A group keeps its colour while it stays among those plotted, whatever its rank (the chart
  // is redrawn when the groups or their order change): a colour a group leaving frees goes to
  // the next group that comes in. `kept` holds the plotted groups only.
  function keptColours(kept, ids) {
    for (const id of [...kept.keys()]) if (!ids.includes(id)) kept.delete(id);
    for (const id of ids) {
      if (!kept.has(id)) kept.set(id, COLOURS.find(c => ![...kept.values()].includes(c)));
    }
    return ids.map(id => kept.get(id));
  }

  async function lagHistory(page) {
    let chart = null;
    let plotted = "";
    const colours = new Map();
    const load = async () => {
      let got;
      try {
        got = await api("/v1/console/lag-history");
        if (page !== shown) return false;
      } catch (e) {
        if (page !== shown) return false;
        if (e.status !== 401) showError(e, "Lag history");
        return false;
      }
      const about = document.getElementById("lag-history-about");
      if (!got.interval_ms) {
        about.textContent = "The service keeps no lag history (OUTBOX_CONSOLE_LAG_INTERVAL_MS is 0).";
        return false;
      }
      const samples = got.samples;
      const newestSample = samples.length ? samples[samples.length - 1] : null;
      const newest = newestSample ? newestSample.groups : [];
      // Past OUTBOX_METRICS_MAX_GROUP_PARTITIONS the service reads group partitions by group id,
      // not by lag: the groups shown are then not surely those that lag most.
      const leftOut = newestSample ? newestSample.group_partitions_left_out : 0;
      about.textContent = `Total lag in records of the ${LAG_GROUPS_SHOWN} groups that lag most now, of those ` +
        `you may describe, over the last ${age(got.window_ms)} (a sample every ${age(got.interval_ms)}, kept by the ` +
        "process this console talks to)." + (leftOut
          ? ` The newest sample left out ${n(leftOut)} group partitions (past OUTBOX_METRICS_MAX_GROUP_PARTITIONS): ` +
            "a group that lags more may be missing, and a group with partitions left out has no total."
          : "");
      const top = newest.slice(0, LAG_GROUPS_SHOWN).map(g => g.group_id);
      if (!chart || plotted !== JSON.stringify(top)) {
        if (chart) { chart.destroy(); charts = charts.filter(c => c !== chart); }
        chart = timeChart(document.getElementById("lag-history"), "Lag (records)", top, got.window_ms / 1000,
          keptColours(colours, top));
        plotted = JSON.stringify(top);
      }
      const lagOf = (sample, id) => {
        const g = sample.groups.find(x => x.group_id === id);
        return g ? g.total_lag : null;
      };
      chart.set([samples.map(x => x.time_ms / 1000), ...top.map(id => samples.map(x => lagOf(x, id)))]);
      document.getElementById("lag-history-now").replaceChildren(...(newest.length
        ? ["Now: ", ...newest.slice(0, LAG_GROUPS_SHOWN).flatMap((g, i) => [i ? ", " : "",
          link(`#/groups/${enc(g.group_id)}`, g.group_id), " ",
          h("strong", { class: "lag-now" }, g.total_lag !== null ? n(g.total_lag)
            : g.complete ? "unknown" : "incomplete")])]
        : [samples.length ? "No group you may describe lags." : "No sample yet."]));
      return true;
    };
    const first = await load();
    if (first && page === shown) every(POLL_MS, load, false);
  }

  // Summaries are built from the API's lists, each bounded: at most DETAILS_LIMIT topics are
  // described and as many groups' lag asked for (the page says so past it), and the open
  // transactions are counted up to the list's own limit.
  const DETAILS_LIMIT = 100;
  const TXN_LIMIT = 10000;
  const OPEN_STATES = ["Ongoing", "Prepared", "PrepareCommit", "PrepareAbort"];

  async function groupLags(list) {
    return Promise.all(list.slice(0, DETAILS_LIMIT).map(g => api(`/v1/groups/${enc(g.group_id)}/lag`).catch(() => null)));
  }
  const plural = (count, noun) => `${n(count)} ${noun}${count === 1 ? "" : "s"}`;
  const beyond = (count, limit) => (count >= limit ? `${n(limit)}+` : n(count));

  async function overviewCounts(whole) {
    const page = shown;
    const quietly = promise => promise.catch(e => { if (e.status !== 401 && e.status !== 403) throw e; return null; });
    let topicList, open, hanging, groupList;
    try {
      [topicList, open, hanging, groupList] = await Promise.all([
        quietly(api("/v1/topics")),
        quietly(api(`/v1/transactions?${new URLSearchParams([...OPEN_STATES.map(x => ["state", x]), ["limit", String(TXN_LIMIT)]])}`)),
        quietly(api(`/v1/transactions?hanging=true&limit=${TXN_LIMIT}`)),
        quietly(api("/v1/groups"))]);
    } catch (e) { if (page === shown) showError(e, "Summary"); return; }
    const lags = groupList ? await groupLags(groupList.groups) : [];
    if (page !== shown) return;
    const openList = open ? open.transactions : [];
    const byState = st => openList.filter(t => st.includes(t.state)).length;
    const lagging = lags.filter(l => l && (l.total_lag === null || l.total_lag > 0)).length;
    const card = (id, value, label, href, detail) => h("a", { class: "count", href, id },
      h("strong", {}, value), h("span", {}, label), detail ? h("small", {}, detail) : "");
    const topicsShown = topicList ? topicList.topics : [];
    const mine = whole ? "" : " you may describe";
    document.getElementById("counts").replaceChildren(
      card("count-topics", n(topicsShown.length), `topics${mine}`, "#/topics",
        plural(topicsShown.reduce((a, t) => a + t.partition_count, 0), "partition")),
      card("count-open", beyond(openList.length, TXN_LIMIT), `open transactions${mine}`, "#/transactions?show=open",
        `${n(byState(["Ongoing"]))} ongoing, ${n(byState(["Prepared"]))} prepared, ${n(byState(["PrepareCommit", "PrepareAbort"]))} completing`),
      card("count-hanging", hanging ? beyond(hanging.transactions.length, TXN_LIMIT) : "–", whole ? "hanging" : "hanging, of those you may describe",
        "#/transactions?show=hanging", "open past the maximum timeout"),
      card("count-lagging", n(lagging), "groups with lag", "#/groups",
        groupList ? `of ${groupList.next_after != null ? `${n(groupList.groups.length)}+` : n(groupList.groups.length)}${mine}${groupList.groups.length > DETAILS_LIMIT ? ` (the first ${DETAILS_LIMIT} asked)` : ""}; unknown lag counts` : ""));
  }

  async function topics() {
    const page = shown;
    const [list, groupList, whole] = await Promise.all([api("/v1/topics").then(x => x.topics),
      api("/v1/groups").then(x => x.groups, () => null), listsAreWhole()]);
    const [described, lags] = await Promise.all([
      Promise.all(list.slice(0, DETAILS_LIMIT).map(t => api(`/v1/topics/${enc(t.name)}`).catch(() => null))),
      groupLags(groupList || [])]);
    if (page !== shown) return;
    // Per topic, the group furthest behind on it: its lag summed over the topic's partitions
    // (unknown where it has committed no offset there).
    const behind = {};
    for (const l of lags) {
      if (!l) continue;
      const per = {};
      for (const p of l.partitions) per[p.topic] = p.lag === null || per[p.topic] === null ? null : (per[p.topic] || 0) + p.lag;
      for (const [topic, lag] of Object.entries(per)) {
        const was = behind[topic];
        if (!was || (was.lag !== null && (lag === null || lag > was.lag))) behind[topic] = { lag, group: l.group_id };
      }
    }
    const sum = (t, k) => t.partitions.reduce((a, p) => a + p[k], 0);
    // A topic's config is null to a principal without describe_configs on it.
    const configCell = (t, shown) => (t.config === null ? "–" : shown(t.config));
    // No group on a topic is known only where every group was listed (the list answered, and
    // no more groups than were asked for their lag) and its lag answered.
    const everyGroupAsked = groupList !== null && groupList.length <= DETAILS_LIMIT;
    const noGroup = whole && everyGroupAsked && lags.every(l => l) ? "no group" : "none you may describe";
    const lagCell = name => {
      const b = behind[name];
      if (!b) return h("span", { class: "muted" }, noGroup);
      return h("span", {}, b.lag === null ? "unknown" : n(b.lag), " ", link(`#/groups/${enc(b.group)}`, b.group));
    };
    main.replaceChildren(h("h1", {}, "Topics"),
      list.length > DETAILS_LIMIT ? h("p", { class: "muted" }, `Sizes and lag of the first ${DETAILS_LIMIT} topics.`) : "",
      table(
        ["topic", "partitions", "records", "size", "most lag (group)", "cleanup policy", "retention", "retention bytes"],
        list.map((t, i) => [link(`#/topics/${enc(t.name)}`, t.name), n(t.partition_count),
          described[i] ? n(sum(described[i], "record_count")) : "–",
          described[i] ? bytes(sum(described[i], "size_bytes")) : "–",
          lagCell(t.name), configCell(t, c => c.cleanup_policy),
          configCell(t, c => c.retention_ms < 0 ? "unlimited" : age(c.retention_ms)),
          configCell(t, c => c.retention_bytes < 0 ? "unlimited" : bytes(c.retention_bytes))]),
        "No topic the principal may describe."));
  }

  async function topic(name) {
    const [t, permitted] = await Promise.all([api(`/v1/topics/${enc(name)}`),
      api(`/v1/topics/${enc(name)}/authorized-operations`)]);
    main.replaceChildren(
      h("p", {}, link("#/topics", "← Topics")),
      h("h1", {}, `Topic ${t.name}`),
      h("p", { class: "muted" }, `${t.config === null ? "" : `cleanup policy ${t.config.cleanup_policy}; `}last stable offset: the first offset of the ` +
        "partition's earliest open transaction (read_committed readers get committed transactions past it too, in commit order)."),
      table(["partition", "log start", "last stable offset", "high watermark", "records", "bytes", ""],
        t.partitions.map(p => [link(`#/topics/${enc(t.name)}/${p.partition}?isolation=read_uncommitted`, String(p.partition)), n(p.log_start_offset), n(p.last_stable_offset), n(p.high_watermark),
          n(p.record_count), bytes(p.size_bytes),
          link(`#/topics/${enc(t.name)}/${p.partition}?isolation=read_uncommitted`, "browse records")])),
      h("h2", {}, "Settings"),
      t.config === null ? h("p", { class: "muted", id: "settings-need" }, "Reading the settings needs describe_configs on the topic.")
        : permitted.authorized_operations.includes("alter_configs") ? settingsForm(t) : settingsList(t.config));
  }

  // A topic's settings (PATCH /v1/topics/{topic}, Kafka's IncrementalAlterConfigs): the keys
  // whose value changed are sent, the others kept. value_format is fixed at creation.
  const CLEANUP_POLICIES = ["delete", "compact", "compact,delete"];
  const SETTINGS = [
    ["cleanup_policy", "what the log cleaner does to old records"],
    ["retention_ms", "delete: records older than this go; -1: no time limit"],
    ["retention_bytes", "delete: the oldest records of a partition go past this size; -1: no size limit"],
    ["delete_retention_ms", "compact: how long a tombstone is kept"],
    ["max_message_bytes", "the largest record a Send may append"],
    ["check_expected_offsets", "every Send must carry expected_offset (KIP-27)"],
  ];
  const settingText = (key, v) => (key === "retention_ms" || key === "retention_bytes") && v < 0 ? "-1 (unlimited)"
    : key.endsWith("_ms") ? `${n(v)} (${age(v)})` : key.endsWith("_bytes") ? `${n(v)} (${bytes(v)})` : String(v);

  function settingsList(config) {
    return h("dl", { id: "topic-settings" },
      [...SETTINGS.map(([k]) => k), "value_format"].flatMap(k => [h("dt", {}, k), h("dd", {}, settingText(k, config[k]))]));
  }

  function settingsForm(t) {
    const status = h("p", { id: "settings-status", class: "muted" });
    const field = (key) => {
      const v = t.config[key];
      if (key === "cleanup_policy") {
        return h("select", { name: key, id: `setting-${key}` }, CLEANUP_POLICIES.map(x => h("option", { value: x, selected: x === v }, x)));
      }
      if (key === "check_expected_offsets") return h("input", { type: "checkbox", name: key, id: `setting-${key}`, checked: v });
      return h("input", { name: key, id: `setting-${key}`, value: String(v), size: 14, inputmode: "numeric" });
    };
    return h("form", { class: "settings", id: "topic-settings", onsubmit: async e => {
      e.preventDefault();
      const f = e.target;
      const changes = {};
      for (const [key] of SETTINGS) {
        const input = f.elements[key];
        let value;
        if (key === "cleanup_policy") value = input.value;
        else if (key === "check_expected_offsets") value = input.checked;
        else {
          const text = input.value.trim();
          if (!/^-?\d+$/.test(text)) {
            status.className = "error";
            status.textContent = `INVALID_REQUEST: ${key} ${JSON.stringify(text)} is not a whole number`;
            input.focus();
            return;
          }
          value = Number(text);
        }
        if (value !== t.config[key]) changes[key] = value;
      }
      if (!Object.keys(changes).length) {
        status.className = "muted";
        status.textContent = "Nothing changed.";
        return;
      }
      try {
        await api(`/v1/topics/${enc(t.name)}`, { method: "PATCH", json: { config: changes } });
        go(`#/topics/${enc(t.name)}`, `Saved: ${Object.entries(changes).map(([k, v]) => `${k} = ${v}`).join(", ")}.`);
      } catch (err) {
        status.className = "error";
        status.textContent = `${err.code}: ${err.message}`;
      }
    } },
    h("table", {}, h("tbody", {}, SETTINGS.map(([key, about]) => h("tr", {},
      h("th", { scope: "row" }, h("label", { for: `setting-${key}` }, key)), h("td", {}, field(key)),
      h("td", { class: "muted" }, about))),
    h("tr", {}, h("th", { scope: "row" }, "value_format"), h("td", {}, t.config.value_format),
      h("td", { class: "muted" }, "set when the topic is created")))),
    h("p", { class: "muted" }, "Retention and compaction act from the log cleaner's next pass: records they remove are gone."),
    h("button", { type: "submit", id: "settings-save" }, "Save settings"), status);
  }

  // The record browser: a page of PAGE records from a position, by default the newest page.
  const PAGE = 100;
  const localTime = ms => { const d = new Date(ms); return `${dateAndTime(d)}.${String(d.getMilliseconds()).padStart(3, "0")}`; };
  // A JSON value as the operator reads it: indented, in a box that scrolls past a few lines.
  const prettyJson = v => h("pre", { class: "json" }, JSON.stringify(v, null, 2));
  const base64OfText = text => {
    const bytes = new TextEncoder().encode(text);
    let binary = "";
    for (const b of bytes) binary += String.fromCharCode(b);
    return btoa(binary);
  };

  async function records(name, partition, params) {
    const isolation = params.get("isolation") === "read_committed" ? "read_committed" : "read_uncommitted";
    const asked = params.get("offset");
    if (asked !== null && !/^\d+$/.test(asked)) {
      throw new ApiError(400, { error_code: "INVALID_REQUEST", message: `offset ${JSON.stringify(asked)} is not a number` });
    }
    const [described, permitted] = await Promise.all([api(`/v1/topics/${enc(name)}`),
      api(`/v1/topics/${enc(name)}/authorized-operations`)]);
    const bounds = described.partitions.find(p => String(p.partition) === String(partition));
    if (!bounds) {
      throw new ApiError(404, { error_code: "UNKNOWN_TOPIC_OR_PARTITION", message: `topic ${name} has no partition ${partition}` });
    }
    // No offset asked: the newest page, the last PAGE offsets before where reads of this
    // isolation end (pager.js: read_uncommitted's the high watermark, read_committed's the log
    // end, whose commit points among them it shows).
    const newest = OutboxPager.newest(bounds, isolation, PAGE);
    const offset = asked === null ? newest : Number(asked);
    const page = await api(`/v1/topics/${enc(name)}/partitions/${enc(partition)}/records?` +
      new URLSearchParams({ offset, isolation, max_records: String(PAGE) }));
    const at = (o, iso = isolation) => `#/topics/${enc(name)}/${partition}?${new URLSearchParams({ isolation: iso, offset: o })}`;
    // A bytes topic's keys and values are {"type": "BINARY", "data": base64}: shown as their
    // base64, named, and its headers as name=base64 in order (names repeat).
    // The format is answered outside the config: a principal without describe_configs reads too.
    const bytesTopic = described.value_format === "bytes";
    const cut = s => s.length > 120 ? `${s.slice(0, 117)}…` : s;
    const base64 = v => h("code", { title: "bytes, in base64" }, cut(`base64:${v.data}`));
    const key = k => k === null ? "–" : bytesTopic ? base64(k) : k;
    const shown = v => bytesTopic ? (v === null ? "null" : base64(v)) : prettyJson(v);
    const headers = hs => !hs || !Object.keys(hs).length ? "–" : bytesTopic
      ? h("code", { title: "bytes, in base64" }, cut(hs.map(x => `${x.name}=${x.value === null ? "null" : `base64:${x.value}`}`).join(" ")))
      : h("code", { class: "headers" }, Object.entries(hs).map(([k, v]) => `${k}: ${v}`).join("\n"));

    const readForm = h("form", { class: "inline", id: "read-form", onsubmit: e => {
      e.preventDefault();
      location.hash = at(e.target.offset.value.trim(), e.target.isolation.value);
    } },
    h("label", {}, "isolation ", h("select", { name: "isolation" },
      ["read_uncommitted", "read_committed"].map(v => h("option", { value: v, selected: v === isolation }, v)))),
    h("label", {}, "from offset ", h("input", { name: "offset", id: "offset", value: offset, size: 10, inputmode: "numeric" })),
    h("button", { type: "submit" }, "Read"));

    const timeForm = h("form", { class: "inline", id: "time-form", onsubmit: async e => {
      e.preventDefault();
      const when = new Date(e.target.time.value).getTime();
      if (!Number.isFinite(when) || when < 0) { showError(new ApiError(400, { error_code: "INVALID_REQUEST", message: "pick a date and time" }), "Jump to a time"); return; }
      try {
        const found = await api(`/v1/topics/${enc(name)}/partitions/${enc(partition)}/offsets?` +
          new URLSearchParams({ timestamp_ms: String(when), isolation }));
        if (found.offset === null) {
          go(at(newest),
            `No record at or after ${localTime(when)}: the newest records instead.`);
        } else {
          go(at(found.offset), `The first record at or after ${localTime(when)} is at offset ${n(found.offset)}.`);
        }
      } catch (err) { showError(err, "Jump to a time"); }
    } },
    h("label", {}, "first record at or after ", h("input", { name: "time", id: "time", type: "datetime-local", step: "1", required: true,
      value: page.records.length ? dateAndTime(new Date(page.records[0].timestamp_ms)).replace(" ", "T") : undefined })),
    h("button", { type: "submit" }, "Go"));

    const count = h("span", { class: "muted", id: "key-count" });
    const filter = h("input", { id: "key-filter", type: "search", placeholder: "key", size: 24, "aria-label": "find by key" });
    const rows = page.records.map(r => [r, h("tr", {}, [
      r.offset, r.commit_position === null ? "–" : r.commit_position,
      badge(r.state || "committed"), key(r.key), shown(r.value), headers(r.headers),
      r.producer_id === null ? "plain" : `${r.producer_id}/${r.producer_epoch}${r.transactional ? " txn" : ""}`,
      h("span", { title: new Date(r.timestamp_ms).toISOString() }, localTime(r.timestamp_ms))].map(c => h("td", {}, c)))]);
    const keyText = r => (r.key === null ? "" : bytesTopic ? `base64:${r.key.data}` : r.key);
    const applyFilter = () => {
      const wanted = filter.value.trim();
      let matched = 0;
      for (const [r, tr] of rows) {
        const hit = !wanted || keyText(r).includes(wanted);
        tr.hidden = !hit;
        if (hit) matched += 1;
      }
      count.textContent = wanted ? `${matched} of ${rows.length} records on this page have a key containing “${wanted}”.` : "";
    };
    filter.addEventListener("input", applyFilter);

    const hasNext = OutboxPager.hasNext(page, bounds, isolation);
    const nav = h("p", { class: "pager" },
      offset > bounds.log_start_offset ? link(at(bounds.log_start_offset), "⇤ oldest") : h("span", { class: "muted" }, "⇤ oldest"), " · ",
      offset > bounds.log_start_offset ? link(at(Math.max(bounds.log_start_offset, offset - PAGE)), "← previous page") : h("span", { class: "muted" }, "← previous page"), " · ",
      hasNext ? link(at(page.next_offset), "next page →") : h("span", { class: "muted" }, "next page →"), " · ",
      offset !== newest || asked === null ? link(at(newest), "newest ⇥") : h("span", { class: "muted" }, "newest ⇥"));

    main.replaceChildren(
      h("p", {}, link(`#/topics/${enc(name)}`, `← Topic ${name}`)),
      h("h1", {}, `${name} / ${partition}`),
      h("p", { class: "muted", id: "bounds" }, `log start ${n(page.log_start_offset)}, last stable offset ${n(page.last_stable_offset)}, ` +
        `high watermark ${n(page.high_watermark)}. Showing ${page.records.length ? `offsets ${n(page.records[0].offset)}–${n(page.records[page.records.length - 1].offset)}` : "no record"} ` +
        `from ${asked === null ? "the newest page" : `offset ${n(offset)}`}. read_uncommitted shows every record in offset order with its state; ` +
        "read_committed only committed ones, in commit order. Times are this browser's local time." +
        (bytesTopic ? " A bytes topic: keys, values and header values are bytes, shown in base64." : "")),
      h("div", { class: "toolbar" }, readForm, timeForm,
        h("form", { class: "inline", onsubmit: e => e.preventDefault() }, h("label", {}, "find by key on this page ", filter), count)),
      nav,
      rows.length
        ? h("table", { id: "records" },
          h("thead", {}, h("tr", {}, ["offset", "commit position", "state", "key", "value", "headers", "producer", "time (local)"].map(x => h("th", {}, x)))),
          h("tbody", {}, rows.map(([, tr]) => tr)))
        : h("p", { class: "muted" }, "No records from this position."),
      hasNext ? nav.cloneNode(true) : h("p", { class: "muted" }, "End of the log."),
      permitted.authorized_operations.includes("write") ? sendForm(name, partition, bytesTopic) : "");
  }

  // A test record, sent as a plain (non-transactional) Send: only for a principal that may
  // write the topic (its authorized operations).
  function sendForm(name, partition, bytesTopic) {
    const status = h("p", { id: "send-status", class: "muted" });
    return h("details", { id: "send", class: "send" },
      h("summary", {}, "Send a test record"),
      h("form", { class: "stacked", onsubmit: async e => {
        e.preventDefault();
        const f = e.target;
        let value;
        if (bytesTopic) {
          value = { type: "BINARY", data: base64OfText(f.value.value) };
        } else {
          try { value = JSON.parse(f.value.value); } catch (err) {
            status.className = "error";
            status.textContent = `INVALID_REQUEST: the value is not JSON (${err.message})`;
            return;
          }
        }
        const record = { key: f.key.value === "" ? null : (bytesTopic ? { type: "BINARY", data: base64OfText(f.key.value) } : f.key.value), value };
        try {
          const sent = await api("/v1/records", { method: "POST", json: { batches: [{ topic: name, partition: Number(partition), records: [record] }] } });
          const offset = sent.results[0].base_offset;
          go(`#/topics/${enc(name)}/${partition}?isolation=read_uncommitted`, `Sent: offset ${n(offset)}.`);
        } catch (err) {
          status.className = "error";
          status.textContent = `${err.code}: ${err.message}`;
        }
      } },
      h("label", {}, "key ", h("input", { name: "key", id: "send-key", size: 30 })),
      h("label", {}, bytesTopic ? "value (text, sent as its UTF-8 bytes) " : "value (JSON) ",
        h("textarea", { name: "value", id: "send-value", rows: 4, cols: 60, required: true }, bytesTopic ? "" : '{"test": true}')),
      h("button", { type: "submit", id: "send-button" }, "Send"), status));
  }

  const STATES = ["Empty", "Ongoing", "Prepared", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
    "PrepareEpochFence", "Dead"];

  // Transactions: open, hanging or all, narrowed by state (open and all), by how long they
  // have been open (open and all) and by transactional id prefix; the filters live in the
  // address, so a filtered list can be reloaded and shared.
  async function transactions(params) {
    const which = ["open", "hanging", "all"].includes(params.get("show")) ? params.get("show") : "open";
    const state = params.get("state") || "";
    const minAgeS = params.get("min_age_s") || "";
    const prefix = params.get("prefix") || "";
    const allowed = which === "open" ? OPEN_STATES : STATES;
    if (state && !allowed.includes(state)) {
      throw new ApiError(400, { error_code: "INVALID_REQUEST", message: `state ${JSON.stringify(state)} is not one of ${allowed.join(", ")}` });
    }
    if (minAgeS && !/^\d+$/.test(minAgeS)) {
      throw new ApiError(400, { error_code: "INVALID_REQUEST", message: `min_age_s ${JSON.stringify(minAgeS)} is not a number of seconds` });
    }
    const query = new URLSearchParams();
    if (which === "hanging") query.append("hanging", "true");
    else {
      for (const st of state ? [state] : which === "open" ? OPEN_STATES : []) query.append("state", st);
      if (minAgeS) query.append("min_age_ms", String(Number(minAgeS) * 1000));
    }
    if (prefix) query.append("transactional_id_prefix", prefix);
    const answer = await api(`/v1/transactions?${query}`);
    const list = answer.transactions;
    const here = extra => `#/transactions?${new URLSearchParams({ show: which, ...extra })}`;
    const form = h("form", { class: "inline", id: "txn-filters", onsubmit: e => {
      e.preventDefault();
      const f = e.target;
      const q = { show: which };
      if (f.state && f.state.value) q.state = f.state.value;
      if (f.min_age_s && f.min_age_s.value.trim()) q.min_age_s = f.min_age_s.value.trim();
      if (f.prefix.value.trim()) q.prefix = f.prefix.value.trim();
      location.hash = `#/transactions?${new URLSearchParams(q)}`;
    } },
    which === "hanging" ? "" : h("label", {}, "state ", h("select", { name: "state", id: "txn-state" },
      h("option", { value: "" }, which === "open" ? "any open" : "any"),
      allowed.map(v => h("option", { value: v, selected: v === state }, v)))),
    which === "hanging" ? "" : h("label", {}, "open at least ", h("input", { name: "min_age_s", id: "txn-min-age", value: minAgeS, size: 6, inputmode: "numeric" }), " s"),
    h("label", {}, "id starts with ", h("input", { name: "prefix", id: "txn-prefix", value: prefix, size: 20 })),
    h("button", { type: "submit" }, "Filter"),
    state || minAgeS || prefix ? link(here({}), "clear") : "");
    main.replaceChildren(
      h("h1", {}, "Transactions"),
      h("p", { class: "tabs" }, ["open", "hanging", "all"].map(w => w === which ? h("strong", {}, w) : link(`#/transactions?show=${w}`, w))
        .flatMap((x, i) => (i ? [" · ", x] : [x]))),
      form,
      answer.next_after != null ? h("p", { class: "muted" }, `The first ${n(list.length)}, and more may follow: narrow the list with the filters.`) : "",
      table(["transactional id", "state", "producer id / epoch", "txn id", "age", "timeout"],
        list.map(t => [link(`#/transactions/${enc(t.transactional_id)}`, t.transactional_id), badge(t.state),
          `${t.producer_id} / ${t.producer_epoch}`, t.txn_id === null ? "–" : t.txn_id, age(t.age_ms),
          age(t.transaction_timeout_ms)]),
        which === "hanging" ? "No hanging transaction." : "No transaction here."));
  }

  async function transaction(id) {
    const [t, permitted] = await Promise.all([api(`/v1/transactions/${enc(id)}`), clusterOperations()]);
    const abortable = ["Ongoing", "Prepared"].includes(t.state);
    const abort = h("button", { class: "danger", id: "abort", disabled: !abortable, onclick: async () => {
      // A Prepared transaction is its application's to decide: the service refuses an operator's
      // abort of one unless forced, so the confirmation says why before it forces.
      const prepared = t.state === "Prepared";
      if (!confirm((prepared ? `Transaction ${t.txn_id} of ${id} is Prepared: its application decides it, and its ` +
        "own database may have committed its side already. Abort it only if that database is known not to have. " : "") +
        `Abort transaction ${t.txn_id} of ${id}? Its records are never shown to read_committed readers, ` +
        "its staged offsets are dropped, and its producer is fenced (epoch bump).")) return;
      try {
        // The txn id confirmed: the service refuses the abort if the id's transaction is another by now.
        const seen = t.txn_id === null ? "" : `txn_id=${t.txn_id}`;
        const query = [prepared ? "force_prepared=true" : "", seen].filter(Boolean).join("&");
        const after = await api(`/v1/admin/transactions/${enc(id)}/abort${query ? "?" + query : ""}`, { method: "POST" });
        await route();
        showNotice(`Aborted: ${id} is ${after.state}.`);
      } catch (e) { showError(e, "Abort"); }
    } }, "Abort…");
    main.replaceChildren(
      h("p", {}, link("#/transactions", "← Transactions")),
      h("h1", {}, `Transaction ${id}`),
      h("dl", {},
        h("dt", {}, "state"), h("dd", {}, badge(t.state)),
        h("dt", {}, "producer id / epoch"), h("dd", {}, `${t.producer_id} / ${t.producer_epoch}`),
        h("dt", {}, "txn id"), h("dd", {}, t.txn_id === null ? "–" : t.txn_id),
        h("dt", {}, "age"), h("dd", {}, age(t.age_ms)),
        h("dt", {}, "timeout"), h("dd", {}, age(t.transaction_timeout_ms))),
      // Without describe on the cluster its operations are answered empty, unknown rather than
      // none: the abort is offered, and a refusal shown as the service words it.
      !permitted.includes("describe") || permitted.includes("alter") || permitted.includes("cluster_action")
        ? h("p", {}, abort, abortable ? "" : h("span", { class: "muted" }, " (only a transaction not decided yet, Ongoing or Prepared, can be aborted)"))
        : h("p", { class: "muted", id: "abort-needs" }, "Aborting a transaction as an operator needs alter or cluster_action on the cluster."),
      h("h2", {}, "Partitions"),
      table(["topic", "partition", "first offset"], t.partitions.map(p => [link(`#/topics/${enc(p.topic)}`, p.topic), p.partition, n(p.first_offset)]),
        "None."),
      h("h2", {}, "Offsets staged"),
      table(["group", "topic", "partition", "offset"], t.pending_offsets.map(o => [link(`#/groups/${enc(o.group_id)}`, o.group_id), o.topic, o.partition, n(o.offset)]),
        "None."));
  }

  async function groups() {
    // One page of GET /v1/groups: a page it cut (by its limit, or by the ids one request reads
    // past the principal's ACLs) answers next_after, and the page then says that more may follow.
    const answer = await api("/v1/groups");
    const list = answer.groups;
    const lags = (await groupLags(list)).map(l => (l ? totalLag(l) : "–"));
    main.replaceChildren(h("h1", {}, "Consumer groups"),
      answer.next_after != null ? h("p", { class: "muted" }, `The first ${n(list.length)}, and more may follow: ` +
        `GET /v1/groups?after=${enc(answer.next_after)} lists the next ones.`) : "",
      table(["group", "generation", "members", "lag (records)"],
        list.map((g, i) => [link(`#/groups/${enc(g.group_id)}`, g.group_id), g.generation_id === null ? "–" : g.generation_id,
          n(g.member_count), i < DETAILS_LIMIT ? lags[i] : "–"]),
        "No group the principal may describe."));
  }

  // ACLs and principals: the API's own lists (describe on the cluster). A principal with alter
  // on the cluster (GET /v1/cluster/authorized-operations) is offered adding and revoking
  // bindings and API keys; to others those controls are not shown, and the API checks every
  // call anyway: a refusal is shown with its code. At most ROWS_LIMIT rows are drawn.
  const ROWS_LIMIT = 1000;
  const ACL_FILTERS = ["principal", "resource_type", "resource_name"];
  const limited = (rows, what) => (rows.length > ROWS_LIMIT
    ? h("p", { class: "muted" }, `The first ${n(ROWS_LIMIT)} of ${n(rows.length)} ${what}.`) : "");

  // The API's ACL enums (app/domain/acl.py: the pattern types, the permissions, the cluster's
  // name), in its order; tests/integration/test_console.py holds them equal to it. The
  // operations a binding may name per resource type are the API's answer (GET /v1/acls/operations).
  const ACL_PATTERN_TYPES = ["literal", "prefixed"];
  const ACL_PERMISSIONS = ["allow", "deny"];
  const CLUSTER_NAME = "outbox-cluster";
  // Every field of a binding: a DeleteAcls filter naming them all deletes that binding only.
  const ACL_FIELDS = ["principal", "resource_type", "resource_name", "pattern_type", "operation", "permission"];
  const bindingText = a => `${a.permission} ${a.principal} ${a.operation} on ${a.resource_type}:${a.resource_name} (${a.pattern_type})`;
  // GET /v1/acls/operations' answer, asked once a page: the table is the serving process's own,
  // fixed while it runs; a reload asks again (after an upgrade, say).
  let aclOperationsOf = null;

  async function acls(params) {
    const query = new URLSearchParams(ACL_FILTERS.filter(k => params.get(k)).map(k => [k, params.get(k)]));
    const [list, permitted] = await Promise.all([api(`/v1/acls${query.toString() ? `?${query}` : ""}`).then(x => x.acls),
      clusterOperations()]);
    const may = permitted.includes("alter");
    // Asked only where the form is offered: to alter on the cluster.
    if (may && aclOperationsOf === null) aclOperationsOf = (await api("/v1/acls/operations")).operations_of;
    const operationsOf = may ? aclOperationsOf : null;
    const filtered = [...query.entries()].map(([k, v]) => `${k.replace("_", " ")} ${v}`).join(", ");
    const revoke = a => h("button", { class: "danger", type: "button", "aria-label": `Revoke ${bindingText(a)}`,
      onclick: async () => {
        if (!confirm(`Revoke the binding ${bindingText(a)}? It stops acting in this process at once, and in every ` +
          "process within OUTBOX_SECURITY_REFRESH_INTERVAL_MS.")) return;
        try {
          const done = await api(`/v1/acls?${new URLSearchParams(ACL_FIELDS.map(k => [k, a[k]]))}`, { method: "DELETE" });
          go(location.hash, done.deleted.length ? `Revoked: ${bindingText(a)}.` : `Nothing revoked: ${bindingText(a)} was stored no more.`);
        } catch (e) { showError(e, "Revoke"); }
      } }, "Revoke…");
    main.replaceChildren(h("h1", {}, "ACLs"),
      h("p", { class: "muted" }, filtered ? ["Bindings of ", h("strong", { id: "acl-filter" }, filtered), " (",
        link("#/acls", "all bindings"), ")."] : "Every binding.",
      may ? "" : " Adding and revoking bindings needs alter on the cluster."),
      may ? aclForm(params, operationsOf) : "",
      limited(list, "bindings"),
      table(["principal", "resource type", "resource name", "pattern", "operation", "permission", ...(may ? [""] : [])],
        list.slice(0, ROWS_LIMIT).map(a => [link(`#/acls?principal=${enc(a.principal)}`, a.principal),
          a.resource_type, link(`#/acls?resource_type=${enc(a.resource_type)}&resource_name=${enc(a.resource_name)}`,
            a.resource_name), a.pattern_type, a.operation, badge(a.permission), ...(may ? [revoke(a)] : [])]),
        "No binding here."));
  }

  // A binding to add (POST /v1/acls): only the API's choices are offered, the operations those
  // of the resource type chosen (`operationsOf`, the API's answer); the cluster is one resource,
  // named outbox-cluster, literal. The fields start from the page's filter.
  function aclForm(params, operationsOf) {
    const status = h("p", { id: "acl-add-status", class: "muted" });
    const select = (name, values, chosen) => h("select", { name, id: `acl-${name}` },
      values.map(v => h("option", { value: v, selected: v === chosen }, v)));
    const type = select("resource_type", Object.keys(operationsOf), params.get("resource_type") || "topic");
    const name = h("input", { name: "resource_name", id: "acl-resource_name", required: true, size: 20,
      value: params.get("resource_name") || undefined, placeholder: "name, prefix or *" });
    const pattern = select("pattern_type", ACL_PATTERN_TYPES, "literal");
    const operation = h("select", { name: "operation", id: "acl-operation" });
    const fit = () => {
      const was = operation.value;
      operation.replaceChildren(...operationsOf[type.value].map(v => h("option", { value: v, selected: v === was }, v)));
      const cluster = type.value === "cluster";
      if (cluster) { name.value = CLUSTER_NAME; pattern.value = "literal"; } else if (name.value === CLUSTER_NAME) name.value = "";
      name.readOnly = cluster;
      pattern.disabled = cluster;
    };
    type.addEventListener("change", fit);
    fit();
    return h("details", { id: "acl-add", class: "send" },
      h("summary", {}, "Add a binding"),
      h("form", { class: "inline wrap", onsubmit: async e => {
        e.preventDefault();
        const f = e.target;
        const binding = { principal: f.principal.value.trim(), resource_type: type.value, resource_name: name.value.trim(),
          pattern_type: pattern.value, operation: operation.value, permission: f.permission.value };
        try {
          const added = (await api("/v1/acls", { method: "POST", json: { acls: [binding] } })).acls[0];
          go(location.hash, `${added.created ? "Added" : "Stored already, left as it was"}: ${bindingText(added)}.`);
        } catch (err) {
          status.className = "error";
          status.textContent = `${err.code}: ${err.message}`;
        }
      } },
      h("label", {}, "permission ", select("permission", ACL_PERMISSIONS, "allow")),
      h("label", {}, "principal ", h("input", { name: "principal", id: "acl-principal", required: true, size: 18,
        value: params.get("principal") || undefined, placeholder: "User:alice or User:*", autocomplete: "off" })),
      h("label", {}, "operation ", operation),
      h("label", {}, "resource type ", type),
      h("label", {}, "resource name ", name),
      h("label", {}, "pattern ", pattern),
      h("button", { type: "submit", id: "acl-add-button" }, "Add binding")),
      status);
  }

  async function principals() {
    const page = shown;
    const [list, permitted] = await Promise.all([api("/v1/principals").then(x => x.principals), clusterOperations()]);
    const may = permitted.includes("alter");
    const listed = h("div", { id: "principal-list" });
    // The key a create answered, shown here once: never stored by the page (not in its storage,
    // not in its address); it goes with the page, or with "Done".
    const created = h("div", { id: "new-key", hidden: true });
    const reload = async () => {
      const got = (await api("/v1/principals")).principals;
      if (page === shown) draw(got);
    };
    // An API key is outbox_<key id>_<secret>: the page knows which key it signed in with.
    const mine = k => (sessionStorage.getItem(CREDENTIAL) || "").startsWith(`outbox_${k.key_id}_`);
    const revoke = (principal, k) => h("button", { class: "danger", type: "button",
      "aria-label": `Revoke key ${k.key_id} of ${principal}`, onclick: async () => {
        if (!confirm(`Revoke API key ${k.key_id} of ${principal}? A client using it is refused (401) by this ` +
          "process at once, and by every process within OUTBOX_SECURITY_REFRESH_INTERVAL_MS." +
          (mine(k) ? " It is the key this console signed in with: the console will ask for another." : ""))) return;
        try {
          await api(`/v1/principals/${enc(principal)}/api-keys/${enc(k.key_id)}`, { method: "DELETE" });
          await reload();
          showNotice(`Revoked: key ${k.key_id} of ${principal}.`);
        } catch (e) { if (e.status !== 401) showError(e, "Revoke key"); }
      } }, "Revoke…");
    const draw = got => listed.replaceChildren(limited(got, "principals"),
      table(["principal", "active keys", "keys (id, created, revoked)", ""],
        got.slice(0, ROWS_LIMIT).map(p => [p.principal, n(p.api_keys.filter(k => k.revoked_ms === null).length),
          h("div", { class: "keys" }, p.api_keys.map(k => h("div", {}, h("code", {}, k.key_id), " ",
            dateAndTime(new Date(k.created_ms)), mine(k) ? " (this console's)" : "",
            k.revoked_ms !== null ? ` revoked ${dateAndTime(new Date(k.revoked_ms))}` : may ? [" ", revoke(p.principal, k)] : ""))),
          link(`#/acls?principal=${enc(p.principal)}`, "ACLs")]),
        "No principal has an API key."));
    draw(list);
    main.replaceChildren(h("h1", {}, "Principals"),
      h("p", { class: "muted" }, "Principals with API keys (never the keys themselves), times in this browser's time zone.",
        may ? "" : " Creating and revoking keys needs alter on the cluster."),
      may ? keyForm(created, reload) : "", created, listed);
  }

  // A new API key (POST /v1/principals/{principal}/api-keys): the answer holds the key, which
  // the service never shows again (it stores a hash), so the page shows it with a copy button.
  function keyForm(created, reload) {
    const status = h("p", { id: "key-create-status", class: "muted" });
    const show = issued => {
      const copied = h("span", { class: "muted", id: "new-key-copied" });
      const value = h("code", { id: "new-key-value" }, issued.api_key);
      const copy = async () => {
        try {
          await navigator.clipboard.writeText(issued.api_key);
          copied.textContent = "Copied.";
        } catch (e) {
          // No clipboard (a page not served over HTTPS, or refused): the key is selected instead.
          getSelection().selectAllChildren(value);
          copied.textContent = "The browser refused to copy: the key is selected, copy it with Ctrl+C.";
        }
      };
      created.hidden = false;
      created.className = "secret";
      created.replaceChildren(
        h("p", {}, h("strong", {}, `New API key for ${issued.principal}`), ` (key id ${issued.key_id}). Copy it now: ` +
          "it will not be shown again, here or anywhere (the service keeps only a hash of it)."),
        h("p", {}, value),
        h("p", {}, h("button", { type: "button", id: "new-key-copy", onclick: copy }, "Copy"), " ",
          h("button", { type: "button", id: "new-key-done", onclick: () => { created.replaceChildren(); created.hidden = true; } },
            "Done"), " ", copied));
    };
    return h("form", { class: "inline", id: "key-create", onsubmit: async e => {
      e.preventDefault();
      const principal = e.target.principal.value.trim();
      let issued;
      try {
        issued = await api(`/v1/principals/${enc(principal)}/api-keys`, { method: "POST" });
      } catch (err) {
        status.className = "error";
        status.textContent = `${err.code}: ${err.message}`;
        return;
      }
      e.target.reset();
      status.textContent = "";
      show(issued);
      try { await reload(); } catch (err) { showError(err, "Principals"); }
    } },
    h("label", {}, "new API key for ", h("input", { name: "principal", id: "key-principal", required: true, size: 24,
      placeholder: "User:alice or alice", autocomplete: "off" })),
    h("button", { type: "submit", id: "key-create-button" }, "Create key"), status);
  }

  // A lag the service cannot know (the group has committed no offset there) is "unknown",
  // never 0: a stuck new group must not look caught up.
  const UNKNOWN_LAG = {
    no_committed_offset: "the group has committed no offset",
    partitions_without_committed_offset: "some partitions have no committed offset",
  };
  const totalLag = lag => (lag.total_lag === null ? "unknown" : n(lag.total_lag));
  const partitionLag = p => (p.lag === null ? "unknown" : `${n(p.lag)}${p.lag_exact ? "" : "+"}`);

  // A group's page opens with what the service kept of the group's lag over the chart's span
  // (GET /v1/console/lag-history): a reload keeps the chart. A sample the group is not in (not
  // among the groups kept then, or not one the principal may describe with its topics: the
  // service leaves those out, it never refuses the history) is a gap, as an unknown total is.
  // The page then adds its own reading every POLL_MS.
  async function keptLag(id) {
    const history = [[], []];
    try {
      const kept = await api("/v1/console/lag-history");
      const since = Date.now() - LAG_SPAN_S * 1000;
      for (const sample of kept.samples) {
        // Not past this browser's clock: the page's own readings follow, in time order.
        if (sample.time_ms < since || sample.time_ms > Date.now()) continue;
        const g = sample.groups.find(x => x.group_id === id);
        history[0].push(sample.time_ms / 1000);
        history[1].push(g ? g.total_lag : null);
      }
    } catch (e) {
      if (e.status !== 401) throw e;  // the page measures from when it opens
    }
    return history;
  }

  async function group(id) {
    const page = shown;
    main.replaceChildren(
      h("p", {}, link("#/groups", "← Consumer groups")),
      h("h1", {}, `Group ${id}`),
      h("p", { class: "muted" }, "Lag counts the committed records the group has still to read: control markers and " +
        "records of open or aborted transactions are not lag."),
      h("div", { id: "lag-table" }), h("div", { id: "lag-chart" }),
      h("h2", {}, "Members"), h("div", { id: "members" }));
    const history = await keptLag(id);
    if (page !== shown) return;
    const plot = timeChart(document.getElementById("lag-chart"), "Lag over time (records)", ["lag"], LAG_SPAN_S);
    plot.set(history);
    every(POLL_MS, async () => {
      let lag;
      try { lag = await api(`/v1/groups/${enc(id)}/lag`); } catch (e) {
        if (page === shown && e.status !== 401) showError(e, `Group ${id}`);
        return;
      }
      if (page !== shown) return;
      document.getElementById("lag-table").replaceChildren(
        lag.total_lag === null
          ? h("p", {}, "total lag ", h("strong", { id: "total-lag" }, "unknown"), `: ${UNKNOWN_LAG[lag.total_lag_unknown_reason]}`)
          : h("p", {}, "total lag ", h("strong", { id: "total-lag" }, n(lag.total_lag)), " records"),
        table(["topic", "partition", "committed offset", "last stable offset", "high watermark", "lag", ""],
          lag.partitions.map(p => [link(`#/topics/${enc(p.topic)}`, p.topic), p.partition, n(p.committed_offset),
            n(p.last_stable_offset), n(p.high_watermark), partitionLag(p),
            p.pending ? badge("offsets staged", "open") : ""]),
          "No partition: the group consumes no topic you may describe."));
      history[0].push(Date.now() / 1000);
      history[1].push(lag.total_lag);  // null (unknown) is a gap in the chart, not a 0
      if (history[0].length > LAG_POINTS) { history[0].shift(); history[1].shift(); }
      // The kept samples hold a group's total only, null where unknown: with nothing known to
      // plot, the chart says why rather than that no data came.
      plot.set(history, lag.total_lag === null ? `Lag unknown: ${UNKNOWN_LAG[lag.total_lag_unknown_reason]}` : undefined);
    });
    try {
      const g = await api(`/v1/groups/${enc(id)}`);
      // No generation: the group never had members, its offsets come from transactions or plain commits.
      document.getElementById("members").replaceChildren(...(g.generation_id === null
        ? [h("p", { class: "muted" }, "No members: its offsets are committed by transactions or without joining.")]
        : [h("p", {}, `generation ${g.generation_id}`), table(
          ["member", "topics", "assignment", "last heartbeat"],
          g.members.map(m => [m.member_id, m.topics.join(", "), m.assignment.map(a => `${a.topic}/${a.partition}`).join(", "),
            age(Date.now() - m.last_heartbeat_ms) + " ago"]), "No members.")]));
    } catch (e) {
      document.getElementById("members").replaceChildren(h("p", { class: "muted" }, `${e.code}: ${e.message}`));
    }
  }

  // --- routing ----------------------------------------------------------------------------

  async function route() {
    shown += 1;
    for (const t of timers) clearInterval(t);
    timers = [];
    for (const c of charts) c.destroy();
    charts = [];
    banner.hidden = true;
    const [path, query] = location.hash.replace(/^#/, "").split("?");
    const params = new URLSearchParams(query || "");
    let parts;
    try {
      parts = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
    } catch (e) {
      main.replaceChildren(h("h1", {}, "Could not show this page"),
        h("p", { class: "error", id: "page-error" }, `INVALID_REQUEST: the address ${location.hash} is not valid`),
        h("p", {}, link("#/", "Back to the overview")));
      return;
    }
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", (parts[0] || "overview") === a.dataset.nav);
    }
    document.getElementById("sign-out").hidden = !sessionStorage.getItem(CREDENTIAL);
    const page = shown;
    try {
      // Without a credential, one request first tells whether the service asks for one: a
      // page's several requests would each be refused, and audited, before the sign-in shows.
      if (!sessionStorage.getItem(CREDENTIAL) && !servesWithoutCredentials) {
        await clusterOperations();
        servesWithoutCredentials = true;
        if (page !== shown) return;
      }
      if (!parts.length) await overview();
      else if (parts[0] === "topics" && parts.length === 1) await topics();
      else if (parts[0] === "topics" && parts.length === 2) await topic(parts[1]);
      else if (parts[0] === "topics" && parts.length === 3) await records(parts[1], parts[2], params);
      else if (parts[0] === "transactions" && parts.length === 1) await transactions(params);
      else if (parts[0] === "transactions" && parts.length === 2) await transaction(parts[1]);
      else if (parts[0] === "groups" && parts.length === 1) await groups();
      else if (parts[0] === "groups" && parts.length === 2) await group(parts[1]);
      else if (parts[0] === "acls" && parts.length === 1) await acls(params);
      else if (parts[0] === "principals" && parts.length === 1) await principals();
      else throw new ApiError(404, { error_code: "NOT_FOUND", message: `no page ${location.hash}` });
      if (pendingNotice) showNotice(pendingNotice);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {  // the sign-in is open; signing in draws the page
        main.replaceChildren(h("p", { class: "muted" }, "Sign in to see this page."));
        pendingNotice = null;
        return;
      }
      main.replaceChildren(h("h1", {}, "Could not show this page"),
        h("p", { class: "error", id: "page-error" }, e instanceof ApiError ? `${e.code}: ${e.message}` : String(e)),
        h("p", {}, link("#/", "Back to the overview")));
    }
    pendingNotice = null;
  }

  window.addEventListener("hashchange", route);
  route();
})();
