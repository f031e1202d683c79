// Opens Phoenix pages in one headless Chromium, a fresh page per request: waits until a text
// shows up, optionally types a filter condition into the page's filter bar and clicks the first table cell
// element showing the awaited text (Phoenix opens an annotation's details there), then saves a screenshot and
// answers with the table rows (cell texts), the open dialogs' texts and the page text, for the Python test to
// assert on.
// Usage: node phoenix_list.cjs, then one JSON request a line on stdin, each answered by one JSON line on
// stdout (the browser closes when stdin does). A request: {url, waitFor, screenshot, filter (a condition, or
// ""), anywhere (the text may show anywhere on the page, a span's details say; nothing is clicked), stat (a
// stats label, e.g. "Latency P99": also wait until the value after it shows a digit)}.
// Env: PLAYWRIGHT_CORE (the playwright-core package dir), CHROMIUM (the browser binary).
// Every wait is on an event or a polled condition with a deadline: the awaited element, the filtered list's
// own GraphQL answer and the rows it changes, and a settled page (no request of the page's in flight and the
// same rows, dialogs and text on six reads 100 ms apart). What each step took goes to stderr.
const { serve } = require("./chromium.cjs");

const POLL_MS = 100;
const SETTLED_READS = 6;

// The page's state as the test reads it: the table rows (cell texts), how each row's annotation values are
// coloured (Phoenix marks a score favourable or not from the project's annotation config with
// data-direction, and tints it), the open dialogs' texts and the page's text.
function readState(page) {
  return page.evaluate(() => ({
    rows: Array.from(document.querySelectorAll("table tr")).map((tr) =>
      Array.from(tr.querySelectorAll("th,td")).map((c) => c.innerText.trim()),
    ),
    directions: Array.from(document.querySelectorAll("table tr")).map((tr) =>
      Array.from(tr.querySelectorAll("[data-direction]")).map((e) => ({
        direction: e.getAttribute("data-direction"),
        text: e.innerText.trim(),
        color: getComputedStyle(e).color,
        background: getComputedStyle(e).backgroundColor,
      })),
    ),
    dialogs: Array.from(document.querySelectorAll("[role=dialog]")).map((d) => d.innerText.trim()),
    text: document.body.innerText,
  }));
}

// Polls until no request of the page is in flight and SETTLED_READS reads POLL_MS apart agree (cells render
// after their rows, a dialog's content after the dialog, stats after the page), or the deadline passes.
async function settle(page, inFlight, timeout) {
  const deadline = Date.now() + timeout;
  let last = null;
  let same = 0;
  for (;;) {
    const state = JSON.stringify(await readState(page));
    same = inFlight.size === 0 && state === last ? same + 1 : 0;
    if (same >= SETTLED_READS - 1) return true;
    if (Date.now() > deadline) return false;
    last = state;
    await page.waitForTimeout(POLL_MS);
  }
}

// Polls until the table's rows differ from ``before`` (a filtered list replaces the shown one), or the
// deadline passes (a filter may leave the same rows: the caller asserts on them).
async function rowsChange(page, before, timeout) {
  const deadline = Date.now() + timeout;
  while (Date.now() < deadline) {
    if (JSON.stringify((await readState(page)).rows) !== before) return true;
    await page.waitForTimeout(POLL_MS);
  }
  return false;
}

// One context for the session, a fresh page per request: the pages share the HTTP and code caches (each load
// of Phoenix's app bundle costs seconds otherwise), as a user's browser tabs do.
let shared = null;

async function browse(browser, request) {
  // Wide enough for the annotation columns, which come after input, output, error and user.
  shared ??= await browser.newContext({ viewport: { width: 2200, height: 760 } });
  const context = shared;
  const { url, waitFor, screenshot, filter, anywhere, stat } = request;
  const started = Date.now();
  const steps = [];
  const step = (name) => steps.push(`${name} ${Date.now() - started} ms`);
  const page = await context.newPage();
  try {
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    const inFlight = new Set();
    // Long-lived streams (server-sent events) never finish: only requests that end count.
    page.on("request", (r) => {
      if (!["eventsource", "websocket"].includes(r.resourceType())) inFlight.add(r);
    });
    page.on("requestfinished", (r) => inFlight.delete(r));
    page.on("requestfailed", (r) => inFlight.delete(r));
    await page.goto(url, { waitUntil: "domcontentloaded", timeout: 60000 });
    step("loaded");
    const awaited = (anywhere ? page : page.locator("table")).getByText(waitFor, { exact: false }).first();
    let found = true;
    let settled = false;
    try {
      if (filter) {
        await page.locator("table tbody tr").first().waitFor({ timeout: 60000 });
        await settle(page, inFlight, 30000);
        step("rows");
        const before = JSON.stringify((await readState(page)).rows);
        // The list's own query with the condition (`filterCondition` on the Spans tab, `traceFilterCondition`
        // on the Traces one), not the filter bar's validation of it (which sends it as `condition`): its
        // answer is what the table shows next.
        const filtered = page.waitForResponse(
          (r) => {
            if (!r.url().includes("/graphql")) return false;
            try {
              const variables = JSON.parse(r.request().postData() || "{}").variables || {};
              return Object.entries(variables).some(([name, value]) => name !== "condition" && value === filter);
            } catch {
              return false;
            }
          },
          { timeout: 60000 },
        );
        // The filter bar is a CodeMirror editor, which may hold a default condition (the Spans tab's
        // "parent_id is None"): replace its text. Inserted in one go: typed key by key, the editor's
        // auto-closing quotes and completions mangle it.
        await page.locator(".cm-content").first().click();
        await page.keyboard.press("Control+A");
        await page.keyboard.insertText(filter);
        await page.keyboard.press("Escape"); // close the completion list, if open
        await page.keyboard.press("Enter");
        await filtered;
        // Its answer can show a while after it arrived (React renders it as a transition, keeping the old
        // list meanwhile).
        step((await rowsChange(page, before, 15000)) ? "filtered" : "filtered, same rows");
      }
      await awaited.waitFor({ timeout: 60000 });
      step("awaited");
      if (stat) {
        await page.waitForFunction(
          (label) => {
            const lines = document.body.innerText.split("\n").map((l) => l.trim()).filter((l) => l);
            const at = lines.indexOf(label);
            return at >= 0 && /\d/.test(lines[at + 1] || "");
          },
          stat,
          { timeout: 30000, polling: POLL_MS },
        );
        step("stats");
      }
      settled = await settle(page, inFlight, 30000);
      step(settled ? "settled" : "not settled");
    } catch (e) {
      found = false;
      process.stderr.write(`while waiting: ${e}\n`);
    }
    const shown = await readState(page); // the list as shown, before a click opens anything over it
    if (found && !anywhere) {
      try {
        await awaited.click(); // the annotation's details (label, score, explanation) open in a popover
      } catch (e) {
        found = false;
        process.stderr.write(`clicking: ${e}\n`);
      }
      // An annotation opens a popover (a dialog); a span name the span's details.
      const dialog = await page
        .getByRole("dialog")
        .first()
        .waitFor({ timeout: 10000 })
        .then(() => true, () => false);
      step(dialog ? "dialog" : "no dialog");
      settled = await settle(page, inFlight, 30000);
      step(settled ? "clicked, settled" : "clicked, not settled");
    }
    // A popover's or panel's entrance animation finished, not caught half-way.
    await page.screenshot({ path: screenshot, fullPage: false, animations: "disabled" });
    step("screenshot");
    const last = await readState(page);
    process.stderr.write(`${url}: ${steps.join(", ")}\n`);
    return {
      found,
      rows: shown.rows,
      directions: shown.directions,
      dialogs: last.dialogs,
      text: last.text,
      errors,
      url: page.url(),
      steps,
    };
  } finally {
    // The next page starts from the app's defaults (Phoenix keeps its preferences in local storage).
    await page.evaluate(() => localStorage.clear()).catch(() => {});
    await page.close();
  }
}

serve(browse);
