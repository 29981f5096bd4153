package sourcetest

import (
	"context"
	"errors"

	"github.com/outboxd/outboxd/source"
)

// parkedSource's Next blocks until next is closed, then fails.
type parkedSource struct{ next chan struct{} }

func (s *parkedSource) Open(context.Context, source.Position) error { return nil }
func (s *parkedSource) Next(ctx context.Context) (source.Tx, error) {
	select {
	case <-s.next:
		return source.Tx{}, errors.New("closed")
	case <-ctx.Done():
		return source.Tx{}, ctx.Err()
	}
}
func (s *parkedSource) Confirm(context.Context, source.Position) error { return nil }
func (s *parkedSource) Close() error                                   { return nil }
