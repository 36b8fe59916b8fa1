package aimd

import "time"

// t0 is the instant every test controller is created at.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns t0 plus sec seconds.
func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func secs(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }

func ok(lat float64, inFlight int) Sample {
	return Sample{Outcome: Success, Latency: secs(lat), InFlight: inFlight}
}

func limited(lat float64, inFlight int) Sample {
	return Sample{Outcome: RateLimited, Latency: secs(lat), InFlight: inFlight}
}

func timedOut(lat float64) Sample { return Sample{Outcome: Timeout, Latency: secs(lat)} }

func failed(lat float64) Sample { return Sample{Outcome: Failure, Latency: secs(lat)} }
