package schema

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// numberMessage says what is wrong for the rules whose message holds numbers, with
// each number written as JSON writes it ([jsonNumber]; counts and indexes as plain
// integers). The validator's own messages print them through a locale (1,000 for a
// thousand) and as float64 (1×10⁰⁶, and 9007199254740993 the same as
// 9007199254740992). ok is false for every other rule.
func numberMessage(k jsonschema.ErrorKind) (msg string, ok bool) {
	switch k := k.(type) {
	case *kind.Minimum:
		return gotWant(k.Got, k.Want), true
	case *kind.Maximum:
		return gotWant(k.Got, k.Want), true
	case *kind.ExclusiveMinimum:
		return gotWant(k.Got, k.Want), true
	case *kind.ExclusiveMaximum:
		return gotWant(k.Got, k.Want), true
	case *kind.MultipleOf:
		return gotWant(k.Got, k.Want), true
	case *kind.MinLength:
		return fmt.Sprintf("got %d, want %d", k.Got, k.Want), true
	case *kind.MaxLength:
		return fmt.Sprintf("got %d, want %d", k.Got, k.Want), true
	case *kind.MinItems:
		return fmt.Sprintf("got %d, want %d", k.Got, k.Want), true
	case *kind.MaxItems:
		return fmt.Sprintf("got %d, want %d", k.Got, k.Want), true
	case *kind.MinProperties:
		return fmt.Sprintf("got %d, want %d", k.Got, k.Want), true
	case *kind.MaxProperties:
		return fmt.Sprintf("got %d, want %d", k.Got, k.Want), true
	case *kind.UniqueItems:
		return fmt.Sprintf("items at %d and %d are equal", k.Duplicates[0], k.Duplicates[1]), true
	case *kind.AdditionalItems:
		return fmt.Sprintf("last %d additionalItem(s) not allowed", k.Count), true
	case *kind.OneOf:
		if len(k.Subschemas) < 2 {
			return "'oneOf' failed, none matched", true
		}
		return fmt.Sprintf("'oneOf' failed, subschemas %d, %d matched", k.Subschemas[0], k.Subschemas[1]), true
	case *kind.MinContains:
		if len(k.Got) == 0 {
			return fmt.Sprintf("min %d items required to match contains schema, but none matched", k.Want), true
		}
		return fmt.Sprintf("min %d items required to match contains schema, but matched %d items at %s", k.Want, len(k.Got), indexes(k.Got)), true
	case *kind.MaxContains:
		return fmt.Sprintf("max %d items required to match contains schema, but matched %d items at %s", k.Want, len(k.Got), indexes(k.Got)), true
	}
	return "", false
}

func gotWant(got, want *big.Rat) string {
	return "got " + jsonNumber(got) + ", want " + jsonNumber(want)
}

func indexes(is []int) string {
	s := make([]string, len(is))
	for i, n := range is {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, " ")
}

// plainMax is the longest number written without an exponent.
const plainMax = 40

// jsonNumber writes r as JSON does, exactly: an integer as its digits; a number that is
// a float64 exactly (data decoded into float64) as encoding/json writes that float64
// (the shortest form that reads back the same: 0.1, 1e+300); any other number (a
// literal such as 0.0025 or 1e400) as its exact decimal. A form longer than plainMax
// characters is written with an exponent, still exactly (1e+400, 1.25e-300). Two
// different numbers never print the same.
func jsonNumber(r *big.Rat) string {
	if r == nil {
		return "null"
	}
	if r.IsInt() {
		if s := r.Num().String(); len(s) <= plainMax {
			return s
		}
	} else if f, exact := r.Float64(); exact {
		if b, err := json.Marshal(f); err == nil {
			return string(b)
		}
	}
	return exactDecimal(r)
}

// exactDecimal writes r, a number with a finite decimal expansion (every JSON literal
// has one), as its exact decimal: plain when that is at most plainMax characters long,
// else as digits with an exponent. A number without one (never a JSON literal, never a
// float64) is written to 20 decimal places.
func exactDecimal(r *big.Rat) string {
	den := new(big.Int).Set(r.Denom())
	var twos, fives int
	two, five, ten := big.NewInt(2), big.NewInt(5), big.NewInt(10)
	mod := new(big.Int)
	for {
		if q, m := new(big.Int).QuoRem(den, two, mod); m.Sign() == 0 {
			den, twos = q, twos+1
			continue
		}
		break
	}
	for {
		if q, m := new(big.Int).QuoRem(den, five, mod); m.Sign() == 0 {
			den, fives = q, fives+1
			continue
		}
		break
	}
	if den.Cmp(big.NewInt(1)) != 0 {
		return r.FloatString(20)
	}
	// r = sign × digits × 10^exp, digits without trailing zeros.
	scale := max(twos, fives)
	n := new(big.Int).Abs(r.Num())
	n.Mul(n, new(big.Int).Exp(ten, big.NewInt(int64(scale)), nil))
	n.Quo(n, r.Denom())
	exp := -scale
	for n.Sign() != 0 {
		q, m := new(big.Int).QuoRem(n, ten, mod)
		if m.Sign() != 0 {
			break
		}
		n, exp = q, exp+1
	}
	digits := n.String()
	sign := ""
	if r.Sign() < 0 {
		sign = "-"
	}
	var plain string
	switch {
	case exp >= 0:
		plain = digits + strings.Repeat("0", exp)
	case -exp < len(digits):
		plain = digits[:len(digits)+exp] + "." + digits[len(digits)+exp:]
	default:
		plain = "0." + strings.Repeat("0", -exp-len(digits)) + digits
	}
	if len(plain) <= plainMax {
		return sign + plain
	}
	e := exp + len(digits) - 1
	mant := digits[:1]
	if len(digits) > 1 {
		mant += "." + digits[1:]
	}
	if e >= 0 {
		return fmt.Sprintf("%s%se+%d", sign, mant, e)
	}
	return fmt.Sprintf("%s%se%d", sign, mant, e)
}
