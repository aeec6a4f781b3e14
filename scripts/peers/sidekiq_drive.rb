# The producer side of scripts/bench_peers.py for Sidekiq, in Ruby with Sidekiq::Client; the
# same actions and JSON output as scripts/peers/drive.py (see there):
#   ruby sidekiq_drive.rb fill one|bulk N TOTAL | pickup N GAP | schedule N START SPAN
require "json"
require_relative "sidekiq_jobs"

BATCH = 1000
# scripts/bench_wait.py pushes WaitJob instead of the no-op BenchJob.
JOB = Object.const_get(ENV.fetch("BENCH_SIDEKIQ_JOB", "BenchJob"))

def fill(mode, n, total)
  if mode == "one"
    calls = Array.new(n) { -> { JOB.perform_async(total) } }
    per_call = 1
  else
    calls = (0...n).step(BATCH).map do |i|
      k = [BATCH, n - i].min
      -> { Sidekiq::Client.push_bulk("class" => JOB, "args" => Array.new(k) { [total] }) }
    end
    per_call = BATCH
  end
  calls.first.call
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  calls.drop(1).each(&:call)
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
  timed = n - [per_call, n].min
  { rate: timed.positive? && elapsed.positive? ? timed / elapsed : nil,
    api: mode == "bulk" ? "Sidekiq::Client.push_bulk (one SADD + LPUSH per 1,000 jobs)" : nil }
end

action, *rest = ARGV
out = case action
      when "fill" then fill(rest[0], Integer(rest[1]), Integer(rest[2]))
      when "pickup"
        Integer(rest[0]).times do
          LatJob.perform_async(Time.now.to_f)
          sleep Float(rest[1])
        end
        {}
      when "schedule"
        now = Time.now.to_f
        n = Integer(rest[0])
        n.times { |i| due = now + Float(rest[1]) + i * Float(rest[2]) / n; LatJob.perform_at(due, due) }
        {}
      else abort "unknown action #{action}"
      end
puts JSON.generate(out)
