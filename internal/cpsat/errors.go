package cpsat

import (
	"errors"
	"math"
)

// MaxDomainValue bounds every variable domain: the solver negates domains and
// keeps sentinels beyond them, so it only accepts values in
// [-MaxDomainValue, MaxDomainValue].
const MaxDomainValue = math.MaxInt64 / 2

// Every model validation error wraps ErrInvalidModel and one of the kinds
// below, so callers and tests can tell them apart with errors.Is.
var (
	ErrInvalidModel = errors.New("cpsat: invalid model")

	ErrUnknownVar  = errors.New("unknown variable")
	ErrNegatedVar  = errors.New("negated literal where a variable is required")
	ErrNotBoolean  = errors.New("literal on a non-Boolean variable")
	ErrEmptyDomain = errors.New("empty domain")
	ErrDomainRange = errors.New("domain outside the supported range")
	ErrOverflow    = errors.New("possible int64 overflow")
	ErrObjective   = errors.New("more than one objective")
	ErrInvalidName = errors.New("variable name is not valid UTF-8")
	ErrTooLarge    = errors.New("serialized model exceeds 2 GiB")
)

// ErrInvalidParams is wrapped by Solve for unusable Params.
var ErrInvalidParams = errors.New("cpsat: invalid parameters")
