package postgres

// LagBytes is the server's WAL end (as last seen on the stream) minus the confirmed LSN: the
// WAL this pipeline has yet to confirm (outboxd_source_lag_bytes). ok is false before anything
// was confirmed or when the WAL end seen is behind the confirmed LSN. Safe to call concurrently
// with the source's other methods.
func (s *Source) LagBytes() (n int64, ok bool) {
	end, conf := s.Progress()
	if end >= conf && conf > 0 {
		return int64(end - conf), true
	}
	return 0, false
}
