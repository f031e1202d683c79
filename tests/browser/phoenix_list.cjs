// Opens a Phoenix list page in headless Chromium, waits until a text shows up, optionally types a filter
// condition into the page's filter bar and clicks the first table cell element showing the awaited text
// (Phoenix opens an annotation's details there), then saves a screenshot and prints the table rows (cell
// texts), the open dialogs' texts and the page text as JSON for the Python test to assert on.
// Usage: node phoenix_list.cjs <url> <wait-for-text> <screenshot.png> [filter condition]
// Env: PLAYWRIGHT_CORE (the playwright-core package dir), CHROMIUM (the browser binary), ANYWHERE=1 (the
// text may show anywhere on the page, a span's details say; nothing is clicked).
const { launch, run } = require("./chromium.cjs");

const [url, waitFor, screenshot, filter] = process.argv.slice(2);

run(async () => {
  const browser = await launch();
  try {
    // Wide enough for the annotation columns, which come after input, output, error and user.
    const page = await browser.newPage({ viewport: { width: 2200, height: 760 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(url, { waitUntil: "domcontentloaded", timeout: 60000 });
    // ANYWHERE=1: the awaited text may be anywhere on the page (a span's details), and nothing is clicked.
    const anywhere = process.env.ANYWHERE === "1";
    const awaited = (anywhere ? page : page.locator("table")).getByText(waitFor, { exact: false }).first();
    const readRows = () =>
      page.$$eval("table tr", (trs) =>
        trs.map((tr) => Array.from(tr.querySelectorAll("th,td")).map((c) => c.innerText.trim())),
      );
    // How each row's annotation values are coloured: Phoenix marks a score favourable or not (from the
    // project's annotation config) with data-direction, and tints it.
    const readDirections = () =>
      page.$$eval("table tr", (trs) =>
        trs.map((tr) =>
          Array.from(tr.querySelectorAll("[data-direction]")).map((e) => ({
            direction: e.getAttribute("data-direction"),
            text: e.innerText.trim(),
            color: getComputedStyle(e).color,
            background: getComputedStyle(e).backgroundColor,
          })),
        ),
      );
    let directions = [];
    let found = true;
    let rows = [];
    try {
      if (filter) {
        await page.locator("table tbody tr").first().waitFor({ timeout: 60000 });
        const before = await page.locator("table tbody tr").count();
        // The filter bar is a CodeMirror editor, which may hold a default condition (the Spans tab's
        // "parent_id is None"): replace its text. Inserted in one go: typed key by key, the editor's
        // auto-closing quotes and completions mangle it.
        await page.locator(".cm-content").first().click();
        await page.keyboard.press("Control+A");
        await page.keyboard.insertText(filter);
        await page.keyboard.press("Escape"); // close the completion list, if open
        await page.keyboard.press("Enter");
        await page
          .waitForFunction((n) => document.querySelectorAll("table tbody tr").length !== n, before, {
            timeout: 15000,
          })
          .catch(() => {}); // the same number of rows can be right, too: the caller asserts on them
      }
      await awaited.waitFor({ timeout: 60000 });
      await page.waitForTimeout(1000); // cells render after their rows
      rows = await readRows(); // the list as shown, before the click opens anything over it
      directions = await readDirections();
      if (!anywhere) {
        await awaited.click(); // the annotation's details (label, score, explanation) open in a popover
        // An annotation opens a popover; a span name opens the span's details instead (no dialog to wait).
        await page.getByRole("dialog").first().waitFor({ timeout: 10000 }).catch(() => {});
        await page.waitForTimeout(1500);
      }
    } catch (e) {
      found = false;
      process.stderr.write(`while waiting: ${e}\n`);
    }
    await page.screenshot({ path: screenshot, fullPage: false });
    if (!found) rows = await readRows();
    const text = await page.evaluate(() => document.body.innerText);
    const dialogs = await page.$$eval("[role=dialog]", (ds) => ds.map((d) => d.innerText.trim()));
    process.stdout.write(JSON.stringify({ found, rows, directions, dialogs, text, errors, url: page.url() }));
  } finally {
    await browser.close();
  }
});
