// Drive headless Chromium: for each job on stdin ({url, inputs, runs}), open a fresh page (a new
// wasm instance, so memory figures do not carry over), call window.check, print one JSON line.
// A browser that fails to start is an error (exit 1), never a skip.
import puppeteer from "puppeteer-core";
import { createInterface } from "node:readline";

const [base] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});
const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const job = JSON.parse(line);
  const page = await browser.newPage();
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  try {
    await page.goto(`${base}/index.html`, { waitUntil: "load" });
    await page.waitForFunction("window.ready === true");
    const isolated = await page.evaluate(() => self.crossOriginIsolated);
    const result = await page.evaluate((j) => window.check(j.url, j.inputs, j.runs), job);
    console.log(JSON.stringify({ ok: true, isolated, errors, ...result }));
  } catch (e) {
    console.log(JSON.stringify({ ok: false, error: String(e).split("\n")[0], errors }));
  }
  await page.close();
}
await browser.close();
