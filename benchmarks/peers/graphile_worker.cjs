#!/usr/bin/env node
// Measure graphile-worker once, in a process of its own (the Node counterpart of measure.py).
//
// run.py starts this with NODE_PATH pointing at benchmarks/peers/.node/node_modules and a
// throwaway database it created. It migrates the schema, bulk-adds N no-op jobs with
// addJobs(), then times run() from the start of the worker until the N-th job has executed
// and runner.stop() has returned: with completeJobBatchDelay set, completions are written in
// batches, and stop() flushes the last batch, so the span ends when every job is durably done.
//
// Usage: node graphile_worker.cjs --target DSN --jobs N --settings JSON
// Prints one JSON object: {version, enqueue_seconds, seconds, completed, remaining}.
"use strict";

const { Logger, makeWorkerUtils, run } = require("graphile-worker");
const { version } = require("graphile-worker/package.json");

const ENQUEUE_CHUNK = 5000; // jobs per addJobs() call, one add_jobs() statement each

// Warnings and errors go to stderr; info and debug lines are dropped so that stdout carries
// only the result and the worker's per-job chatter costs nothing in the timed span.
const logger = new Logger(() => (level, message) => {
  if (level === "warning" || level === "error") console.error(`graphile-worker ${level}: ${message}`);
});

/** Parse --target, --jobs and --settings; run.py is the only intended caller. */
function parseArgs(argv) {
  const args = { settings: "{}" };
  for (let i = 0; i < argv.length; i += 2) {
    args[argv[i].replace(/^--/, "")] = argv[i + 1];
  }
  if (!args.target || !args.jobs) {
    throw new Error("usage: graphile_worker.cjs --target DSN --jobs N [--settings JSON]");
  }
  return { target: args.target, jobs: Number(args.jobs), settings: JSON.parse(args.settings) };
}

/** Seconds elapsed since a process.hrtime.bigint() reading. */
function secondsSince(start) {
  return Number(process.hrtime.bigint() - start) / 1e9;
}

/** Migrate the schema and add `jobs` no-op jobs in bulk; returns the seconds enqueueing took. */
async function enqueue(utils, jobs) {
  await utils.migrate();
  const start = process.hrtime.bigint();
  for (let added = 0; added < jobs; added += ENQUEUE_CHUNK) {
    const size = Math.min(ENQUEUE_CHUNK, jobs - added);
    await utils.addJobs(Array.from({ length: size }, () => ({ identifier: "noop", payload: {} })));
  }
  return secondsSince(start);
}

/**
 * Run one worker pool until it has executed `jobs` jobs and recorded them all as done (a job
 * counts as done once graphile-worker has deleted it: the task function returning is not
 * enough, its completion is written afterwards), then stop it; returns the count.
 */
async function work(utils, target, jobs, settings) {
  let completed = 0;
  let finish;
  const allDone = new Promise((resolve) => {
    finish = resolve;
  });
  const runner = await run({
    logger,
    noHandleSignals: true,
    taskList: {
      noop: async () => {
        completed += 1;
        if (completed === jobs) finish();
      },
    },
    preset: { worker: { connectionString: target, ...settings } },
  });
  await allDone;
  await completionsWritten(utils);
  await runner.stop();
  return completed;
}

/** Wait (up to a minute) until the queue table is empty: the last completions are written. */
async function completionsWritten(utils) {
  const deadline = Date.now() + 60_000;
  while ((await remainingJobs(utils)) > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Jobs still in the queue table (completed jobs are deleted by graphile-worker). */
async function remainingJobs(utils) {
  return utils.withPgClient(async (client) => {
    const { rows } = await client.query("SELECT count(*)::int AS n FROM graphile_worker.jobs");
    return rows[0].n;
  });
}

async function main() {
  const { target, jobs, settings } = parseArgs(process.argv.slice(2));
  const utils = await makeWorkerUtils({ connectionString: target, logger });
  try {
    const enqueueSeconds = await enqueue(utils, jobs);
    const start = process.hrtime.bigint();
    const completed = await work(utils, target, jobs, settings);
    const seconds = secondsSince(start);
    const remaining = await remainingJobs(utils);
    const result = { version, enqueue_seconds: enqueueSeconds, seconds, completed, remaining };
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await utils.release();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
