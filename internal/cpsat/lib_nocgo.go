//go:build !cgo

package cpsat

import (
	"context"
	"errors"
)

// nativeLib is never created without cgo; the type exists so lib.go compiles.
type nativeLib struct{ path string }

func openLibrary(string) (*nativeLib, error) {
	return nil, errors.New("this binary was built with CGO_ENABLED=0, which cannot load shared libraries")
}

func (l *nativeLib) solve(context.Context, []byte, []byte) ([]byte, bool) {
	panic("cpsat: solve without a loaded library")
}
