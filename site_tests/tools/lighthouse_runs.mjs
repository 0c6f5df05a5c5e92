// Lighthouse runs one after another in one Chromium, for site_tests/site/test_browser.py.
//
//     node site_tests/tools/lighthouse_runs.mjs PLAN.json
//
// PLAN is {modules, chrome, flags, profile, waits, runs: [{url, out, categories,
// cpuSlowdownMultiplier}]}: where the pinned npm tools live, the Chromium to start with `flags`
// and the profile folder `profile` (inside the test session's guarded folder, so a killed run
// leaves no Chromium), Lighthouse's waits for a page (maxWaitForFcp, maxWaitForLoad, in ms,
// stretched by code/pace.py), and the runs, in order. Each report is written as JSON to its
// `out`. A run without a multiplier keeps Lighthouse's own (4). One Chromium for all the runs
// spares a start per run; Lighthouse opens each page in a fresh tab and clears the origin's
// storage first.
//
// Each report also gets mainThreadCpuMs, ours and not Lighthouse's: the CPU time the page's main
// thread spent in its tasks, from the trace Lighthouse recorded. Lighthouse's own main-thread
// work is those tasks' wall-clock durations, which stretch whenever another process takes the
// core; site_tests/tools/lighthouse_gate.py says why the gate reads the CPU time instead.
import fs from 'node:fs';
import path from 'node:path';
import {createRequire} from 'node:module';
import {pathToFileURL} from 'node:url';

const plan = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const require = createRequire(path.join(plan.modules, 'package.json'));
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);

const lighthouse = (await load('lighthouse')).default;
const {launch} = await load('chrome-launcher');

// The page's renderers: those of the trace's main frame (the one without a parent). The trace
// starts on the blank tab, and the navigation may commit the page in another renderer than the
// blank tab's, so, as Lighthouse's own trace processor reads it (findMainFramePidTids), they
// are the processes the frame committed in, or, with no commit in the trace, the one it
// started in.
function mainFramePids(events) {
  const started = events.find((event) => event.name === 'TracingStartedInBrowser');
  const frame = started.args.data.frames.find((each) => !each.parent);
  const committed = events.filter(
    (event) => (event.name === 'FrameCommittedInBrowser' || event.name === 'ProcessReadyInBrowser') &&
      event.args?.data?.frame === frame.frame && event.args.data.processId,
  );
  const pids = committed.length ? committed.map((event) => event.args.data.processId) : [frame.processId];
  return new Set(pids);
}

// Each renderer's main thread is the one named CrRendererMain (a process the frame only passed
// through may have none in the trace: it ran no task of the page). A task's `tdur` is its
// thread-clock time.
function mainThreadTasks(events, pid) {
  const main = events.find(
    (event) => event.name === 'thread_name' && event.pid === pid && event.args.name === 'CrRendererMain',
  );
  if (main === undefined) {
    return [];
  }
  return events.filter(
    (event) => event.pid === pid && event.tid === main.tid && event.ph === 'X' &&
      (event.name === 'RunTask' || event.name === 'ThreadControllerImpl::RunTask'),
  );
}

function mainThreadCpuMs(events) {
  const tasks = [...mainFramePids(events)].flatMap((pid) => mainThreadTasks(events, pid));
  if (tasks.length === 0 || tasks.some((task) => task.tdur === undefined)) {
    throw new Error('the trace holds no thread-clock time for the main thread\'s tasks');
  }
  return tasks.reduce((sum, task) => sum + task.tdur, 0) / 1000;
}

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
    Object.assign(flags, plan.waits);
    flags.onlyCategories = run.categories;
    if (run.cpuSlowdownMultiplier) {
      flags.throttling = {cpuSlowdownMultiplier: run.cpuSlowdownMultiplier};
    }
    const result = await lighthouse(run.url, flags);
    const report = {...result.lhr, mainThreadCpuMs: mainThreadCpuMs(result.artifacts.Trace.traceEvents)};
    fs.writeFileSync(run.out, JSON.stringify(report));
    console.log(`${run.url} -> ${run.out}`);
  }
} finally {
  await chrome.kill();
}
