// Push a job that queued (or Sidekiq) runs, from Node with ioredis (docs/producers.md).
// Run as it is, it pushes HardWorker("bob", 5) now and HardWorker("later", 1) in five
// minutes to $REDIS_URL (default redis://127.0.0.1:6379/0).
"use strict";
const crypto = require("node:crypto");
const Redis = require("ioredis");

/**
 * Push the job klass(...args) and return its jid. options: queue (default "default"),
 * retry (true, false or a number of retries), at (a Unix time in seconds: run it then, not
 * now), and any payload key of your own ({ tenant: 7 }).
 */
async function queuedPush(redis, klass, args, options = {}) {
  if (!Array.isArray(args)) throw new TypeError("args must be an array");
  const { at, ...rest } = options;
  const now = Date.now() / 1000;
  const job = { class: klass, args, queue: "default", retry: true, ...rest,
                jid: crypto.randomBytes(12).toString("hex"), created_at: now };
  if (at !== undefined && at > now) {
    await redis.zadd("schedule", at, JSON.stringify(job));
  } else {
    job.enqueued_at = now;
    const replies = await redis.pipeline()
      .sadd("queues", job.queue)
      .lpush(`queue:${job.queue}`, JSON.stringify(job))
      .exec();
    for (const [error] of replies) if (error) throw error;  // exec() resolves with them
  }
  return job.jid;
}

module.exports = { queuedPush };

if (require.main === module) {
  // With "namespace: myapp" in queued's config: new Redis(url, { keyPrefix: "myapp:" })
  const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379/0");
  (async () => {
    console.log(await queuedPush(redis, "HardWorker", ["bob", 5]));
    console.log(await queuedPush(redis, "HardWorker", ["later", 1],
                                 { at: Date.now() / 1000 + 300 }));
    await redis.quit();
  })().catch((error) => { console.error(error); process.exit(1); });
}
