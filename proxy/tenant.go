package proxy

import "fmt"

// HeaderTenant names the tenant a call belongs to: within one urgency,
// the tenants with calls waiting in a lane share its slots fairly (see
// package queue). Governor's to read; it is not sent upstream.
const HeaderTenant = "X-Governor-Tenant"

// DefaultTenant is the tenant of the calls that name none.
const DefaultTenant = "default"

// MaxTenantLen is the longest tenant name accepted.
const MaxTenantLen = 64

// ValidateTenant checks a tenant name: 1 to MaxTenantLen characters,
// letters, digits and . _ - : @ only, so that a name is safe to show and
// to log as it is. Its error says what is wrong with the name; the caller
// adds where the name came from.
func ValidateTenant(name string) error {
	if name == "" || len(name) > MaxTenantLen {
		return fmt.Errorf("want 1 to %d characters, got %d", MaxTenantLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		if !tenantChar[name[i]] {
			return fmt.Errorf("%q: only letters, digits and . _ - : @ are allowed", name)
		}
	}
	return nil
}

var tenantChar = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '-' || c == ':' || c == '@'
	}
	return t
}()

// tenantOf reads X-Governor-Tenant: absent or empty means DefaultTenant;
// a name that ValidateTenant refuses is an error.
func tenantOf(v []byte) (string, error) {
	if len(v) == 0 {
		return DefaultTenant, nil
	}
	if len(v) > MaxTenantLen {
		return "", fmt.Errorf("%s: want at most %d characters, got %d", HeaderTenant, MaxTenantLen, len(v))
	}
	name := string(v)
	if err := ValidateTenant(name); err != nil {
		return "", fmt.Errorf("%s: %w", HeaderTenant, err)
	}
	return name, nil
}
