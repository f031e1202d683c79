// Debian's Chromium, headless, through playwright-core (its own browser download cannot work here and is not
// needed with executablePath). Env: PLAYWRIGHT_CORE (the playwright-core package dir), CHROMIUM (the binary).
const readline = require("readline");
const { chromium } = require(process.env.PLAYWRIGHT_CORE || "playwright-core");

// No background traffic of the browser's own: the tests count the pages' requests.
const FLAGS = [
  "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
];

function launch() {
  const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
  return chromium.launch({ executablePath, headless: true, args: FLAGS });
}

// Runs main(); a failure is printed with its stack and exits 2 (the Python side shows stderr).
function run(main) {
  main().catch((e) => {
    process.stderr.write(String(e && e.stack ? e.stack : e) + "\n");
    process.exit(2);
  });
}

// Launches one browser and answers each JSON request read from stdin, one a line, with handle(browser,
// request)'s answer as one JSON line on stdout ({error} if it threw); closes the browser when stdin closes.
function serve(handle) {
  run(async () => {
    const browser = await launch();
    try {
      for await (const line of readline.createInterface({ input: process.stdin })) {
        if (!line.trim()) continue;
        let answer;
        try {
          answer = await handle(browser, JSON.parse(line));
        } catch (e) {
          answer = { error: String(e && e.stack ? e.stack : e) };
        }
        process.stdout.write(JSON.stringify(answer) + "\n");
      }
    } finally {
      await browser.close();
    }
  });
}

module.exports = { launch, run, serve };
