<?php
// Push a job that queued (or Sidekiq) runs, from PHP with phpredis (docs/producers.md).
// Run as it is, it pushes HardWorker("bob", 5) now and HardWorker("later", 1) in five
// minutes to $REDIS_URL (default redis://127.0.0.1:6379/0).

/**
 * Push the job $class(...$args) and return its jid. $options: "queue" (default "default"),
 * "retry" (true, false or a number of retries), "at" (a Unix time: run it then, not now),
 * and any payload key of your own ("tenant" => 7).
 */
function queued_push(Redis $redis, string $class, array $args, array $options = []): string
{
    $now = microtime(true);
    $at = $options['at'] ?? null;
    unset($options['at']);
    $job = ['class' => $class, 'args' => array_values($args), 'queue' => 'default',
            'retry' => true];
    $job = array_merge($job, $options);
    $job['jid'] = bin2hex(random_bytes(12));
    $job['created_at'] = $now;
    // Ruby's JSON as far as PHP can: "/" and non-ASCII as they are, 1.0 stays a float.
    $flags = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION
           | JSON_THROW_ON_ERROR;
    if ($at !== null && $at > $now) {
        $redis->zAdd('schedule', $at, json_encode($job, $flags));
    } else {
        $job['enqueued_at'] = $now;
        $redis->multi(Redis::PIPELINE)
              ->sAdd('queues', $job['queue'])
              ->lPush('queue:' . $job['queue'], json_encode($job, $flags))
              ->exec();
    }
    return $job['jid'];
}

if (PHP_SAPI === 'cli' && realpath($argv[0] ?? '') === __FILE__) {
    $url = parse_url(getenv('REDIS_URL') ?: 'redis://127.0.0.1:6379/0');
    $redis = new Redis();
    $redis->connect($url['host'], $url['port'] ?? 6379);
    $redis->select((int) ltrim($url['path'] ?? '/0', '/'));
    // With "namespace: myapp" in queued's config:
    // $redis->setOption(Redis::OPT_PREFIX, 'myapp:');
    echo queued_push($redis, 'HardWorker', ['bob', 5]), "\n";
    echo queued_push($redis, 'HardWorker', ['later', 1], ['at' => time() + 300]), "\n";
}
