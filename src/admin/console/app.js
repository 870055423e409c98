// The ktimer console: a client of the admin API (the routes in docs/operations.md), no build step.
// Views (by URL hash): #/ applications and the timer list, #/timer/ID one timer with its
// history, next fires and actions, #/dead dead letters with re-drive.
'use strict';

const $ = (sel) => document.querySelector(sel);
const view = $('#view');
const tokenInput = $('#token');
tokenInput.value = sessionStorage.getItem('ktimer-token') || '';
tokenInput.addEventListener('change', () => {
  sessionStorage.setItem('ktimer-token', tokenInput.value);
  route();
});

function esc(s) {
  return String(s ?? '').replace(/[&<>"']/g, (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
}

function when(ms) {
  return ms == null ? '–' : new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
}

// Calls the admin API; throws Error(reason) on an error answer.
async function api(method, path, body) {
  const headers = {};
  if (tokenInput.value) headers.Authorization = 'Bearer ' + tokenInput.value;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok && resp.status !== 202) throw new Error(`${resp.status}: ${data.reason || data.error || 'error'}`);
  return data;
}

function showError(e) {
  const p = $('#error');
  p.hidden = !e;
  p.textContent = e ? e.message : '';
}

async function route() {
  showError(null);
  const hash = location.hash || '#/';
  try {
    if (hash.startsWith('#/timer/')) await timerView(decodeURIComponent(hash.slice(8)));
    else if (hash.startsWith('#/dead')) await deadView();
    else await listView();
  } catch (e) {
    showError(e);
  }
}

const STATES = ['SCHEDULED', 'PAUSED', 'FIRED', 'CANCELLED', 'COMPLETED', 'DEAD_LETTERED'];
let filters = {application: '', state: '', prefix: ''};
// The cursors of the pages visited (the first page has none) and of the next page.
let pages = [''];
let nextCursor = null;

async function listView() {
  const apps = await api('GET', '/applications');
  const rows = Object.entries(apps.applications).map(([app, counts]) =>
    `<tr><td><a href="#/" data-app="${esc(app)}" class="app-link">${esc(app)}</a></td>` +
    STATES.map((s) => `<td class="num">${counts[s] || 0}</td>`).join('') + '</tr>').join('');
  view.innerHTML = `
    <h2>Applications</h2>
    <table id="apps"><tr><th>application</th>${STATES.map((s) => `<th>${s}</th>`).join('')}</tr>${rows}</table>
    <p class="muted">SCHEDULED and PAUSED: now. Done states: since each partition was last rebuilt.</p>
    <h2>Timers</h2>
    <form class="filters" id="filters">
      <label>application <input name="application" value="${esc(filters.application)}"></label>
      <label>state <select name="state"><option value="">any</option>${STATES.map((s) =>
        `<option ${filters.state === s ? 'selected' : ''}>${s}</option>`).join('')}</select></label>
      <label>id prefix <input name="prefix" value="${esc(filters.prefix)}"></label>
      <button type="submit" id="search">Search</button>
    </form>
    <table id="timers"><tr><th>timer</th><th>application</th><th>state</th><th>kind</th><th>next due</th><th>partition</th></tr></table>
    <div class="actions"><button id="prev">previous page</button><button id="next">next page</button></div>`;
  view.querySelectorAll('.app-link').forEach((a) => a.addEventListener('click', (ev) => {
    ev.preventDefault();
    filters = {application: a.dataset.app, state: '', prefix: ''};
    pages = [''];
    listView().catch(showError);
  }));
  $('#filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    filters = {application: f.get('application'), state: f.get('state'), prefix: f.get('prefix')};
    pages = [''];
    loadPage().catch(showError);
  });
  $('#next').addEventListener('click', () => loadPage(1).catch(showError));
  $('#prev').addEventListener('click', () => loadPage(-1).catch(showError));
  await loadPage();
}

// Shows the current page of timers; `step` 1 goes to the next page, -1 back.
async function loadPage(step = 0) {
  if (step > 0) {
    if (!nextCursor) return;
    pages.push(nextCursor);
  }
  if (step < 0) {
    if (pages.length <= 1) return;
    pages.pop();
  }
  const q = new URLSearchParams({limit: '50'});
  for (const [k, v] of Object.entries(filters)) if (v) q.set(k, v);
  const cursor = pages[pages.length - 1];
  if (cursor) q.set('cursor', cursor);
  const data = await api('GET', '/timers?' + q);
  nextCursor = data.cursor;
  const table = $('#timers');
  table.querySelectorAll('tr.timer').forEach((r) => r.remove());
  for (const t of data.timers) {
    const tr = document.createElement('tr');
    tr.className = 'timer';
    tr.dataset.id = t.timer_id;
    tr.innerHTML = `<td><a class="timer-link" href="#/timer/${encodeURIComponent(t.timer_id)}">${esc(t.timer_id)}</a></td>` +
      `<td>${esc(t.application)}</td><td class="state state-${esc(t.state)}">${esc(t.state)}</td>` +
      `<td>${esc(t.kind)}</td><td>${when(t.due_ms)}</td><td class="num">${t.partition}</td>`;
    table.appendChild(tr);
  }
  $('#next').disabled = !nextCursor;
  $('#prev').disabled = pages.length <= 1;
}

function historyRows(history) {
  return history.map((e) => e.type === 'fire'
    ? `<tr><td>${when(e.fired_ms)}</td><td>fire</td><td>${esc(e.outcome)}</td>` +
      `<td>due ${when(e.due_ms)}, <b>${e.lateness_ms} ms late</b>, attempt ${e.attempt}</td><td>${esc(e.reason)}</td></tr>`
    : `<tr><td>${when(e.at_ms)}</td><td>${esc(e.op)}</td><td>${esc(e.outcome)}</td>` +
      `<td>request ${esc(e.request_id)}, offset ${e.offset}</td><td>${esc(e.reason)}</td></tr>`).join('');
}

// The next due instants (GET /timers/{id}/next): UTC, the zone's wall clock, DST notes.
function nextRows(next) {
  if (!next.length) return '<li>none</li>';
  return next.map((d) => `<li>${when(d.due_ms)}${d.local ? ' (' + esc(d.local) + ')' : ''}` +
    `${d.note ? ' <b>' + esc(d.note) + '</b>' : ''}</li>`).join('');
}

async function timerView(id) {
  const t = await api('GET', '/timers/' + encodeURIComponent(id));
  const next = await api('GET', `/timers/${encodeURIComponent(id)}/next?n=5`);
  const last = t.last_fire;
  view.innerHTML = `
    <h2>Timer ${esc(t.timer_id)}</h2>
    <dl class="timer">
      <dt>state</dt><dd id="timer-state" class="state state-${esc(t.state)}">${esc(t.state)}</dd>
      <dt>application</dt><dd>${esc(t.application)}</dd>
      <dt>kind</dt><dd>${esc(t.kind)} ${t.schedule ? esc(JSON.stringify(t.schedule)) : ''}</dd>
      <dt>next due</dt><dd>${when(t.due_ms)}</dd>
      <dt>version</dt><dd>${t.version} (partition ${t.partition})</dd>
      <dt>callback topic</dt><dd>${esc(t.callback_topic || '(the service\'s fired topic)')}, ${esc(t.callback?.mode)}</dd>
      <dt>payload</dt><dd><code>${esc(t.callback?.payload_preview)}</code> (${t.payload_bytes} bytes)</dd>
      <dt>last fire</dt><dd id="last-fire">${last ? `due ${when(last.due_ms)}, ${last.lateness_ms} ms late, attempt ${last.attempt}, ${esc(last.outcome)}` : 'none'}</dd>
      <dt>dead letters</dt><dd>${t.dead_letters || 0}${t.last_dead_letter_reason ? ': ' + esc(t.last_dead_letter_reason) : ''}</dd>
    </dl>
    <div class="actions">
      <button data-action="pause">Pause</button>
      <button data-action="resume">Resume</button>
      <button data-action="fire-now">Fire now</button>
      <button data-action="cancel" class="danger">Cancel</button>
    </div>
    <p id="action-result" class="muted"></p>
    <h3>Next fires</h3>
    <ol id="next-fires">${nextRows(next.next)}</ol>
    <h3>History</h3>
    <table id="history"><tr><th>time</th><th>what</th><th>outcome</th><th>details</th><th>reason</th></tr>${historyRows(t.history)}</table>`;
  view.querySelectorAll('[data-action]').forEach((b) => b.addEventListener('click', async () => {
    try {
      const r = await api('POST', `/timers/${encodeURIComponent(id)}/${b.dataset.action}`);
      $('#action-result').textContent = `${b.dataset.action}: ${r.outcome || 'sent'} ${r.reason || ''}`;
      await timerView(id);
      $('#action-result').textContent = `${b.dataset.action}: ${r.outcome || 'sent'} ${r.reason || ''}`;
    } catch (e) {
      showError(e);
    }
  }));
}

async function deadView() {
  const data = await api('GET', '/dead-letters?limit=200');
  const rows = data.timers.map((t) =>
    `<tr><td><a href="#/timer/${encodeURIComponent(t.timer_id)}">${esc(t.timer_id)}</a></td><td>${esc(t.application)}</td>` +
    `<td class="num">${t.dead_letters ?? 1}</td><td>${when(t.last_dead_letter_due_ms)}</td><td>${esc(t.last_dead_letter_reason)}</td>` +
    `<td><button data-redrive="${esc(t.timer_id)}">Re-drive</button></td></tr>`).join('');
  view.innerHTML = `<h2>Dead letters</h2>
    <table id="dead"><tr><th>timer</th><th>application</th><th>dead letters</th><th>last due</th><th>reason</th><th></th></tr>${rows}</table>
    <p id="action-result" class="muted"></p>`;
  view.querySelectorAll('[data-redrive]').forEach((b) => b.addEventListener('click', async () => {
    try {
      const r = await api('POST', `/timers/${encodeURIComponent(b.dataset.redrive)}/fire-now`);
      $('#action-result').textContent = `re-drive ${b.dataset.redrive}: ${r.outcome || 'sent'}`;
    } catch (e) {
      showError(e);
    }
  }));
}

// The live fire rate and lateness of this instance, from its Prometheus metrics.
let previous = null;
async function live() {
  try {
    const text = await (await fetch('/metrics')).text();
    const value = (re) => text.split('\n').filter((l) => re.test(l))
      .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
    const now = {t: Date.now(), fires: value(/^ktimer_fires_total\{outcome="delivered"\}/),
      sum: value(/^ktimer_fire_lateness_seconds_sum/), count: value(/^ktimer_fire_lateness_seconds_count/)};
    if (previous) {
      const dt = (now.t - previous.t) / 1000;
      const fires = now.fires - previous.fires;
      const n = now.count - previous.count;
      $('#rate').textContent = `${(fires / dt).toFixed(0)} fires/s`;
      $('#lateness').textContent = n > 0 ? `lateness ${(1000 * (now.sum - previous.sum) / n).toFixed(1)} ms avg` : 'lateness –';
    }
    previous = now;
  } catch (e) {
    // The metrics are a convenience; the console works without them.
  }
}

window.addEventListener('hashchange', route);
route();
live();
setInterval(live, 2000);
