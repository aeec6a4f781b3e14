# Sidekiq 6.4 (Debian's ruby-sidekiq), for scripts/bench_peers.py: `sidekiq -r ./sidekiq_jobs.rb
# -c N -q default`; Redis from REDIS_URL. The jobs do what scripts/peers/common.py does for the
# Python peers. How the side-by-side run starts it, and why, is in scripts/bench_configs.py.
require "sidekiq"

# redis-rb's connection driver, for the server and the producer alike. "hiredis" is its C
# driver (Debian's ruby-hiredis); redis-rb loads it only when asked (driver: :hiredis), so a
# stock setup runs the pure-Ruby one, which makes one Sidekiq process a third slower here.
driver = ENV.fetch("BENCH_SIDEKIQ_DRIVER", "ruby").to_sym
Sidekiq.configure_server { |config| config.redis = { driver: driver } }
Sidekiq.configure_client { |config| config.redis = { driver: driver } }

# Per-job log lines off, as for every system in the benchmark (queued: job_logging false;
# Celery, Dramatiq, Huey, RQ: WARNING).
Sidekiq.logger.level = Logger::WARN
# redis-rb 4.8 warns on every BRPOP that Sidekiq 6.4 passes its timeout positionally: a line
# on stderr per fetch, which a deploy with its logs off would not keep either.
Redis.silence_deprecations = ENV["BENCH_SIDEKIQ_WARNINGS"] != "1"

class BenchJob
  include Sidekiq::Worker

  def perform(total)
    n = Sidekiq.redis { |c| c.incr("bench:done") }
    key = if n == 1 then "bench:first"
          elsif n == total then "bench:last"
          elsif n == total / 10 then "bench:warm"
          end
    Sidekiq.redis { |c| c.set(key, Time.now.to_f.to_s) } if key
  end
end

class LatJob
  include Sidekiq::Worker

  def perform(t0)
    started = Time.now.to_f
    Sidekiq.redis { |c| c.rpush("bench:lat", (started - t0).to_s) }
  end
end

# The waiting job of scripts/bench_wait.py: BENCH_WAIT seconds of sleep (as a blocking I/O call:
# the GVL is free meanwhile), then what BenchJob does.
class WaitJob
  include Sidekiq::Worker
  WAIT = Float(ENV.fetch("BENCH_WAIT", "0.02"))

  def perform(total)
    sleep WAIT
    BenchJob.new.perform(total)
  end
end
