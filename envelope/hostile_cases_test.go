package envelope

import "strings"

// failedAtMs is the fixed dead-letter time the tests use (the Python probe
// pins its clock to the same value).
const failedAtMs int64 = 1749132730000

// hostileCase is one body of the hostile table. reason is the expected
// PoisonError.Reason ("" when the body decodes); accepts is the expected
// Accepts verdict of a body that decodes.
type hostileCase struct {
	name    string
	body    string
	reason  string
	accepts bool
}

// good is a minimal set of members that makes a body acceptable with a job.
const good = `"trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0`

func withGood(prefix string) string { return `{` + prefix + good + `}` }

func nested(open, close string, n int) string {
	return strings.Repeat(open, n) + strings.Repeat(close, n)
}

// hostileCases is the table: every body's verdict and (in the golden file
// testdata/hostile.golden) its exact dead-letter bytes.
var hostileCases = []hostileCase{
	// well-formed envelopes
	{"order-compact", `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`, "", true},
	{"urn-alias", `{"urn":"urn:u",` + good + `}`, "", true},
	{"job-and-urn", `{"job":"urn:j","urn":"urn:u",` + good + `}`, "", true},
	{"urn-then-job", `{"urn":"urn:u","job":"urn:j",` + good + `}`, "", true},
	{"job-number-urn-string", `{"job":5,"urn":"urn:u",` + good + `}`, "", true},
	{"job-blank-urn-string", `{"job":" \t","urn":"urn:u",` + good + `}`, "", true},
	{"dup-job-last-good", `{"job":5,"job":"urn:a",` + good + `}`, "", true},
	{"escaped-job-key", `{"j\u006fb":"urn:a",` + good + `}`, "", true},
	{"leading-trailing-ws", " \n" + withGood(`"job":"urn:a",`) + " \n", "", true},
	{"unknown-members-kept", `{"job":"urn:a","x":{"y":[1,2,{"z":null}]},"JOB":1,"Meta":"m",` + good + `}`, "", true},
	{"huge-numbers-in-data", `{"job":"urn:a","trace_id":"t","data":{"a":1e400,"b":123456789012345678901234567890,"c":-0.0e-0},"meta":{"schema_version":1},"attempts":0}`, "", true},
	{"huge-number-unknown", withGood(`"job":"urn:a","x":1e400,`), "", true},
	{"lone-surrogate-in-data", `{"job":"urn:a","trace_id":"t","data":{"s":"\ud800"},"meta":{"schema_version":1},"attempts":0}`, "", true},
	{"surrogate-pair", `{"job":"urn:a","trace_id":"t","data":{"s":"\ud83d\ude00 café ☕"},"meta":{"schema_version":1},"attempts":0}`, "", true},
	{"attempts-negative", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":-1}`, "", true},
	{"attempts-minus-zero", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":-0}`, "", true},
	{"attempts-int64-max", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":9223372036854775807}`, "", true},
	{"attempts-null", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":null}`, "", false},
	{"no-attempts", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1}}`, "", false},
	{"dup-attempts-good", withGood(`"job":"urn:a","attempts":4,`), "", true},
	{"deep-1001", withGood(`"job":"urn:a","x":` + nested("[", "]", 1001) + `,`), "", true},
	{"deep-10000", `{"job":"urn:a",` + good + `,"x":` + nested("[", "]", 9999) + `}`, "", true},

	// decode, but Accepts says no
	{"schema-version-2", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0}`, "", false},
	{"schema-version-null", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":null},"attempts":0}`, "", false},
	{"no-trace-id", `{"job":"urn:a","data":{},"meta":{"schema_version":1},"attempts":0}`, "", false},
	{"trace-id-null", `{"job":"urn:a","trace_id":null,"data":{},"meta":{"schema_version":1},"attempts":0}`, "", false},
	{"trace-id-blank", `{"job":"urn:a","trace_id":" \t","data":{},"meta":{"schema_version":1},"attempts":0}`, "", false},
	{"no-meta", `{"job":"urn:a","trace_id":"t","data":{},"attempts":0}`, "", false},
	{"meta-null", `{"job":"urn:a","trace_id":"t","data":{},"meta":null,"attempts":0}`, "", false},
	{"Meta-not-meta", `{"job":"urn:a","Meta":{"schema_version":1},"trace_id":"t","data":{},"attempts":0}`, "", false},
	{"no-data", `{"job":"urn:a","trace_id":"t","meta":{"schema_version":1},"attempts":0}`, "", false},
	{"data-null", `{"job":"urn:a","trace_id":"t","data":null,"meta":{"schema_version":1},"attempts":0}`, "", false},
	{"dead-letter-present", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":3,"dead_letter":{"reason":"failed","error":null,"exception":null,"failed_at":1,"original_queue":"orders","attempts":3,"lang":"php"}}`, "", true},
	{"dead-letter-null", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0,"dead_letter":null}`, "", true},

	// poison: bytes
	{"invalid-utf8", "{\"job\":\"urn:a\",\"x\":\"\xff\"}", ReasonInvalidUTF8, false},
	{"invalid-utf8-key", "{\"\xc3\x28\":1}", ReasonInvalidUTF8, false},
	{"overlong-utf8", "{\"job\":\"urn:a\",\"x\":\"\xc0\xaf\"}", ReasonInvalidUTF8, false},
	{"utf8-encoded-surrogate", "{\"job\":\"urn:a\",\"x\":\"\xed\xa0\x80\"}", ReasonInvalidUTF8, false},
	{"invalid-utf8-outside-string", "{\"job\":\"urn:a\"}\xff", ReasonInvalidUTF8, false},
	{"bom", "\ufeff" + withGood(`"job":"urn:a",`), ReasonInvalidJSON, false},

	// poison: not JSON
	{"empty", ``, ReasonInvalidJSON, false},
	{"whitespace-only", " \n\t ", ReasonInvalidJSON, false},
	{"trailing-bytes", withGood(`"job":"urn:a",`) + ` x`, ReasonInvalidJSON, false},
	{"two-objects", `{"job":"urn:a"}{"job":"urn:b"}`, ReasonInvalidJSON, false},
	{"nan", `{"job":"urn:a","data":{"x":NaN}}`, ReasonInvalidJSON, false},
	{"infinity", withGood(`"job":"urn:a","x":Infinity,`), ReasonInvalidJSON, false},
	{"minus-infinity", withGood(`"job":"urn:a","x":-Infinity,`), ReasonInvalidJSON, false},
	{"leading-zero", withGood(`"job":"urn:a","x":01,`), ReasonInvalidJSON, false},
	{"single-quotes", `{'job':'urn:a'}`, ReasonInvalidJSON, false},
	{"control-char-in-string", "{\"job\":\"urn:a\n\"," + good + "}", ReasonInvalidJSON, false},
	{"truncated", `{"job":"urn:a","data":{`, ReasonInvalidJSON, false},
	{"trailing-comma", `{"job":"urn:a",}`, ReasonInvalidJSON, false},
	{"bad-escape", `{"job":"urn:\x"}`, ReasonInvalidJSON, false},

	// poison: not an object
	{"array", `[1,2]`, ReasonNotObject, false},
	{"string", `"x"`, ReasonNotObject, false},
	{"number", `12`, ReasonNotObject, false},
	{"null", `null`, ReasonNotObject, false},
	{"true", ` true `, ReasonNotObject, false},

	// poison: typed member of the wrong type
	{"trace-id-number", `{"job":"urn:a","trace_id":5,"data":{},"meta":{"schema_version":1}}`, ReasonWrongType, false},
	{"data-array", `{"job":"urn:a","trace_id":"t","data":[1],"meta":{"schema_version":1}}`, ReasonWrongType, false},
	{"data-string", `{"job":"urn:a","trace_id":"t","data":"x","meta":{"schema_version":1}}`, ReasonWrongType, false},
	{"meta-array", `{"job":"urn:a","trace_id":"t","data":{},"meta":[]}`, ReasonWrongType, false},
	{"attempts-float", withGood(`"job":"urn:a","attempts":1.0,`), ReasonWrongType, false},
	{"attempts-exponent", withGood(`"job":"urn:a","attempts":1e2,`), ReasonWrongType, false},
	{"attempts-bool", withGood(`"job":"urn:a","attempts":true,`), ReasonWrongType, false},
	{"attempts-string", withGood(`"job":"urn:a","attempts":"1",`), ReasonWrongType, false},
	{"attempts-beyond-int64", withGood(`"job":"urn:a","attempts":9223372036854775808,`), ReasonWrongType, false},
	{"dup-attempts-bad-first", withGood(`"job":"urn:a","attempts":"x",`), ReasonWrongType, false},
	{"schema-version-string", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":"1"}}`, ReasonWrongType, false},
	{"schema-version-float", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1.0}}`, ReasonWrongType, false},
	{"meta-dup-schema-version", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":"x","schema_version":1}}`, ReasonWrongType, false},
	{"meta-lang-number", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1,"lang":1}}`, ReasonWrongType, false},
	{"meta-created-at-float", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1,"created_at":1.5}}`, ReasonWrongType, false},
	{"dead-letter-array", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"dead_letter":[]}`, ReasonWrongType, false},
	{"dead-letter-reason-number", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"dead_letter":{"reason":1}}`, ReasonWrongType, false},
	{"dead-letter-failed-at-float", `{"job":"urn:a","trace_id":"t","data":{},"meta":{"schema_version":1},"dead_letter":{"failed_at":1.5}}`, ReasonWrongType, false},
	// poison whose attempts is readable: the dead-letter block carries it (issue 22)
	{"poison-attempts-readable", `{"job":"urn:a","trace_id":5,"data":{},"meta":{"schema_version":1},"attempts":7}`, ReasonWrongType, false},
	{"poison-attempts-int64-max", `{"job":"urn:a","trace_id":5,"data":{},"meta":{"schema_version":1},"attempts":9223372036854775807}`, ReasonWrongType, false},
	{"poison-attempts-negative", `{"job":"urn:a","trace_id":5,"data":{},"meta":{"schema_version":1},"attempts":-1}`, ReasonWrongType, false},

	// poison: identity-less
	{"empty-object", `{}`, ReasonIdentityLess, false},
	{"whitespace-before-brace", "{\"a\":1 \n }", ReasonIdentityLess, false},
	{"missing-urn", `{` + good + `}`, ReasonIdentityLess, false},
	{"JOB-uppercase", `{"JOB":"urn:a",` + good + `}`, ReasonIdentityLess, false},
	{"job-number-only", `{"job":5,` + good + `}`, ReasonIdentityLess, false},
	{"urn-number-only", `{"urn":5,` + good + `}`, ReasonIdentityLess, false},
	{"job-empty", `{"job":"",` + good + `}`, ReasonIdentityLess, false},
	{"dup-job-last-bad", `{"job":"urn:a","job":5,` + good + `}`, ReasonIdentityLess, false},
	{"identity-less-attempts-2", `{"attempts":2}`, ReasonIdentityLess, false},
	{"identity-less-unicode", "{\"x\":\"café \u2028 </> &\"}", ReasonIdentityLess, false},
	{"identity-less-has-dead-letter", `{"dead_letter":{},"x":1}`, ReasonIdentityLess, false},
	{"identity-less-escaped-dead-letter", `{"dead\u005fletter":{},"x":1}`, ReasonIdentityLess, false},
	{"identity-less-nested-dead-letter", `{"x":{"dead_letter":1}}`, ReasonIdentityLess, false},
	{"identity-less-lone-surrogate", `{"x":"\ud800"}`, ReasonIdentityLess, false},
	{"identity-less-trailing-ws", "{\"a\":1} \n", ReasonIdentityLess, false},
	{"identity-less-deep-998", `{"x":` + nested("[", "]", 998) + `}`, ReasonIdentityLess, false},

	// poison: too deep
	{"deep-10001", `{"job":"urn:a",` + good + `,"x":` + nested("[", "]", 10000) + `}`, ReasonTooDeep, false},
	{"deep-objects-10001", strings.Repeat(`{"a":`, 10000) + `{}` + strings.Repeat(`}`, 10000), ReasonTooDeep, false},
	{"deep-array-unterminated", strings.Repeat("[", 20000), ReasonTooDeep, false},
}
