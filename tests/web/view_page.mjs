// Open one local HTML page (the `report` output) in headless Chromium with the network cut off:
// any request other than the page itself is recorded and refused. Prints one JSON line with the
// console errors, those requests, what the page drew, and what the download-cost view computes
// after its inputs are edited; writes a full-page screenshot. A browser that fails to start is
// an error (exit 1), never a skip.
import puppeteer from "puppeteer-core";
import { pathToFileURL } from "node:url";

const [page_path, screenshot] = process.argv.slice(2);
const url = pathToFileURL(page_path).href;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});
const page = await browser.newPage();
await page.setViewport({ width: 1280, height: 900 });
const errors = [], requests = [];
page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
page.on("pageerror", (e) => errors.push(String(e)));
await page.setRequestInterception(true);
page.on("request", (r) => {
  if (r.url() === url) return r.continue();
  requests.push(r.url());
  return r.abort();
});
await page.goto(url, { waitUntil: "load" });
const drawn = await page.evaluate(() => ({
  methods: [...document.querySelectorAll("#methods tbody tr")].map((tr) => tr.dataset.method),
  failed: [...document.querySelectorAll("#methods td.failed")].map((td) => td.textContent),
  boxes: document.querySelectorAll("#treemap rect").length,
  duplicate_boxes: document.querySelectorAll("#treemap rect.duplicate").length,
  title: document.getElementById("title").textContent,
}));
// The cost view: 1,000,000 downloads at 1 USD per GB, served uncompressed.
await page.evaluate(() => {
  const set = (id, v) => { const e = document.getElementById(id); e.value = v; e.dispatchEvent(new Event("input")); };
  set("downloads", "1000000"); set("price", "1"); set("encoding", "bytes");
});
const costs = await page.evaluate(() => Object.fromEntries(
  [...document.querySelectorAll("#costs tbody tr")].map((tr) => [tr.dataset.method, tr.cells[4].textContent])));
await page.screenshot({ path: screenshot, fullPage: true });
console.log(JSON.stringify({ errors, requests, costs, ...drawn }));
await browser.close();
