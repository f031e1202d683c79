// Opens a faithtrace HTML report (file://) in headless Chromium and prints, as JSON, what the page shows: every
// figure ([data-figure]), the plots and their curves' points, the answers each filter leaves visible, the
// marked text, the skipped lines, and every network request and Content-Security-Policy violation the page
// caused (each request is recorded and aborted: the report must need none).
// Usage: node eval_report.cjs, then one JSON request a line on stdin, each answered by one JSON line on
// stdout, all in one browser (it closes when stdin does); each request gets a context of its own (nothing
// cached from an earlier page). A request: {url (the report's file URL), screenshot (a .png path), fullPage
// (the screenshot is the whole page, not the first screen), width / height (the viewport, default 1280 x 900)}.
// Env: PLAYWRIGHT_CORE (the playwright-core package dir), CHROMIUM (the browser binary).
const { serve } = require("./chromium.cjs");

async function report(browser, request) {
  const { url, screenshot } = request;
  const width = Number(request.width || 1280);
  const height = Number(request.height || 900);
  const context = await browser.newContext({ viewport: { width, height } });
  try {
    const requests = [];
    // Anything but the report itself is a request the report should not make: recorded, then refused.
    await context.route("**/*", (route) => {
      const asked = route.request().url();
      if (asked === url) return route.continue();
      if (!requests.includes(asked)) requests.push(asked);
      return route.abort();
    });
    const page = await context.newPage();
    page.on("request", (request) => {
      if (request.url() !== url && !requests.includes(request.url())) requests.push(request.url());
    });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(m.text());
    });
    // Registered before the page's own script runs: a blocked load or script shows up here.
    await page.addInitScript(() => {
      window.__violations = [];
      document.addEventListener("securitypolicyviolation", (e) =>
        window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`),
      );
    });
    await page.goto(url, { waitUntil: "load", timeout: 60000 });
    await page.waitForTimeout(300); // late loads (an image in an answer, a font) would start by now

    const read = () =>
      page.evaluate(() => {
        const visible = (e) => !e.closest("[hidden]") && e.getClientRects().length > 0;
        const figures = {};
        for (const e of document.querySelectorAll("[data-figure]")) {
          figures[e.getAttribute("data-figure")] = {
            text: e.textContent.trim(),
            value: JSON.parse(e.getAttribute("data-value")),
          };
        }
        const points = (id) => {
          const path = document.querySelector(`[id="${id}"] path`);
          if (!path) return null;
          const d = path.getAttribute("d") || "";
          return { vertices: (d.match(/[ML]/g) || []).length, moves: (d.match(/M/g) || []).length };
        };
        const plots = {};
        for (const svg of document.querySelectorAll("svg[data-plot]")) {
          plots[svg.getAttribute("data-plot")] = {
            ids: Array.from(svg.querySelectorAll("g[id]")).map((g) => g.id),
            width: svg.getBoundingClientRect().width,
          };
        }
        return {
          figures,
          plots,
          curves: Object.fromEntries(
            ["roc-curve", "pr-curve", "sweep-balanced-accuracy", "sweep-precision", "sweep-recall"].map((id) => [
              id,
              points(id),
            ]),
          ),
          answers: Array.from(document.querySelectorAll("article.answer")).map((a) => ({
            id: a.getAttribute("data-id"),
            visible: visible(a),
            failed: a.getAttribute("data-failed"),
            kind: a.getAttribute("data-kind"),
            score: a.querySelector(".score").textContent.trim(),
            answer: (a.querySelector(".answer-text") || { textContent: null }).textContent,
            claims: Array.from(a.querySelectorAll("li.claim")).map((li) => ({
              verdict: li.getAttribute("data-verdict"),
              text: li.textContent.trim(),
              passage: (li.querySelector(".passage") || { textContent: null }).textContent,
            })),
          })),
          marks: Array.from(document.querySelectorAll("article.answer mark")).map((m) => ({
            answer: m.closest("article").getAttribute("data-id"),
            text: m.textContent,
            classes: m.className,
            claim: m.getAttribute("data-claim"),
            background: getComputedStyle(m).backgroundColor,
          })),
          skipped: Array.from(document.querySelectorAll("#skipped tr.skip")).map((tr) =>
            Array.from(tr.querySelectorAll("td")).map((td) => td.textContent.trim()),
          ),
          gate: (document.getElementById("gate") || { textContent: null }).textContent,
          shown: (document.getElementById("shown") || { textContent: "" }).textContent,
          pwned: window.__pwned === undefined ? null : String(window.__pwned),
          violations: window.__violations,
          scripts: document.scripts.length,
          // Where each section and answer starts on the page, in pixels (for cutting screenshots).
          offsets: Array.from(document.querySelectorAll("section[id], article.answer")).map((e) => [
            e.id || e.getAttribute("data-id"),
            Math.round(e.getBoundingClientRect().top + window.scrollY),
          ]),
        };
      });

    const page0 = await read();
    const filters = {};
    for (const button of await page.locator("#answers .filters button").all()) {
      const name = await button.getAttribute("data-filter");
      await button.click();
      const state = await read();
      filters[name] = {
        visible: state.answers.filter((a) => a.visible).map((a) => a.id),
        pressed: await button.getAttribute("aria-pressed"),
        shown: state.shown,
      };
    }
    await page.locator('#answers .filters button[data-filter="all"]').click();
    await page.screenshot({ path: screenshot, fullPage: Boolean(request.fullPage) });
    const last = await read();
    return { ...page0, filters, requests, errors, violations: last.violations, url: page.url() };
  } finally {
    await context.close();
  }
}

serve(report);
