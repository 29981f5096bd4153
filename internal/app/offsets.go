package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/source"
)

// ErrRefused marks `offsets set` refusals: the position cannot be served by the source.
var ErrRefused = errors.New("position refused")

// OffsetsShow prints the stored position and where the source is now.
func OffsetsShow(ctx context.Context, c *config.Config, w io.Writer) error {
	ad, err := adapterFor(c, nil)
	if err != nil {
		return err
	}
	store, err := offsetStore(c, ad.Name())
	if err != nil {
		return err
	}
	stored, err := store.Load(ctx)
	if err != nil {
		return err
	}
	if stored == "" {
		fmt.Fprintf(w, "stored position:      (none in %s: %s)\n", storeDescription(c, ad.Name()), ad.NoStoredPosition())
	} else {
		fmt.Fprintf(w, "stored position:      %s\n", stored)
	}
	return scrubbed(ad.ShowOffsets(ctx, stored, w), secretsOf(c, ad))
}

// storeDescription names the offsets store of c for messages; sourceName is the adapter's Name.
func storeDescription(c *config.Config, sourceName string) string {
	if c.Offsets.Store == "kafka" {
		return fmt.Sprintf("offsets topic %s, key %s (offsets.topic)", c.Offsets.Topic, pipelineID(c, sourceName))
	}
	return fmt.Sprintf("offsets file %s (offsets.path)", c.Offsets.Path)
}

// OffsetsSet validates pos against what the source can still serve and stores it.
func OffsetsSet(ctx context.Context, c *config.Config, pos source.Position, w io.Writer) error {
	ad, err := adapterFor(c, nil)
	if err != nil {
		return err
	}
	store, err := offsetStore(c, ad.Name())
	if err != nil {
		return err
	}
	old, err := store.Load(ctx)
	if err != nil {
		return err
	}
	refused, err := ad.CheckPosition(ctx, pos, w)
	if err != nil {
		return scrubbed(err, secretsOf(c, ad))
	}
	if refused != nil {
		return fmt.Errorf("%w: %s", ErrRefused, Scrub(refused.Error(), secretsOf(c, ad)...))
	}
	if err := store.Save(ctx, pos); err != nil {
		return err
	}
	fmt.Fprintf(w, "stored position %s (was %s). Restart outboxd to replay from it; a running outboxd overwrites it.\n", pos, old)
	return nil
}

// scrubbed is err with the secrets removed from its text (drivers' errors may echo the DSN).
func scrubbed(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	if msg := Scrub(err.Error(), secrets...); msg != err.Error() {
		return errors.New(msg)
	}
	return err
}
