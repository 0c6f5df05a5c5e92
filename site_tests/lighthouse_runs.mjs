// Lighthouse runs one after another in one Chromium, for site_tests/test_browser.py.
//
//     node site_tests/lighthouse_runs.mjs PLAN.json
//
// PLAN is {modules, chrome, flags, profile, runs: [{url, out, categories, cpuSlowdownMultiplier}]}:
// where the pinned npm tools live, the Chromium to start with `flags` and the profile folder
// `profile` (inside the test session's guarded folder, so a killed run leaves no Chromium), and
// the runs, in order. Each report is written as JSON to its `out`. A run without a multiplier
// keeps Lighthouse's own (4). One Chromium for all the runs spares a start per run; Lighthouse
// opens each page in a fresh tab and clears the origin's storage first.
import fs from 'node:fs';
import path from 'node:path';
import {createRequire} from 'node:module';
import {pathToFileURL} from 'node:url';

const plan = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const require = createRequire(path.join(plan.modules, 'package.json'));
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);

const lighthouse = (await load('lighthouse')).default;
const {launch} = await load('chrome-launcher');

fs.mkdirSync(plan.profile, {recursive: true}); // chrome-launcher writes its logs there
const chrome = await launch({
  chromePath: plan.chrome,
  chromeFlags: plan.flags,
  userDataDir: plan.profile,
  logLevel: 'error',
});
try {
  for (const run of plan.runs) {
    const flags = {port: chrome.port, output: 'json', logLevel: 'error', disableFullPageScreenshot: true};
    flags.onlyCategories = run.categories;
    if (run.cpuSlowdownMultiplier) {
      flags.throttling = {cpuSlowdownMultiplier: run.cpuSlowdownMultiplier};
    }
    const result = await lighthouse(run.url, flags);
    fs.writeFileSync(run.out, result.report);
    console.log(`${run.url} -> ${run.out}`);
  }
} finally {
  await chrome.kill();
}
