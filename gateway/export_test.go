package gateway

// UDPBudgetQuota is the datagrams one window of udp.import-rate rate lets
// through, for the tests of package gateway_test.
func UDPBudgetQuota(rate int) int { return newUDPBudget(rate).quota }

// FlowMapRefresh is how long a count of the flow map serves /metrics.
const FlowMapRefresh = flowMapRefresh
