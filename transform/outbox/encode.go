package outbox

// initEncoding checks and prepares the encoding options of r.cfg (called once by New).
func (r *Router) initEncoding() error { return nil }
