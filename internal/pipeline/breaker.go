package pipeline

import "github.com/outboxd/outboxd/internal/pipeline/delivery"

// Breaker is kafka.dlq_max_rate's breaker; it lives in the delivery core (delivery.Breaker),
// which counts every record's outcome.
type Breaker = delivery.Breaker
