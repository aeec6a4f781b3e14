# Sidekiq 6.4 (Debian's ruby-sidekiq): `sidekiq -r ./sidekiq_jobs.rb -c 10 -q default`, one
# process; Redis from REDIS_URL, stock pure-Ruby redis driver (SIDEKIQ_FORMAT.md section 9).
# The jobs do what scripts/peers/common.py does for the Python peers.
require "sidekiq"

# Per-job log lines off, as for every system in the benchmark (queued: job_logging false;
# Celery, Dramatiq, Huey, RQ: WARNING).
Sidekiq.logger.level = Logger::WARN

class BenchJob
  include Sidekiq::Worker

  def perform(total)
    n = Sidekiq.redis { |c| c.incr("bench:done") }
    return unless n == 1 || n == total

    Sidekiq.redis { |c| c.set(n == 1 ? "bench:first" : "bench:last", Time.now.to_f.to_s) }
  end
end

class LatJob
  include Sidekiq::Worker

  def perform(t0)
    started = Time.now.to_f
    Sidekiq.redis { |c| c.rpush("bench:lat", (started - t0).to_s) }
  end
end
