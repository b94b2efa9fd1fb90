-- fetch: GET the URL given to wrk (a file, or a thumbnail with ?thumb=), nothing else.
function done(summary, latency, requests)
  io.write(string.format("WRKJSON {\"requests\":%d,\"duration_us\":%d,\"p50_us\":%d,\"p99_us\":%d," ..
    "\"non2xx\":%d,\"socket_errors\":%d}\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
