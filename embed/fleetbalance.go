package embed

import (
	"time"

	"github.com/sirupsen/logrus"
)

// DefaultTenantBalanceInterval is TenantsConfig.BalanceInterval's default.
const DefaultTenantBalanceInterval = 30 * time.Second

// maxYieldsPerLook bounds the leaderships one look hands over, so that a
// fleet rebalancing after an instance's restart moves its tenants a few at
// a time.
const maxYieldsPerLook = 8

// balance spreads the leadership of the tenants over the instances until
// Close: every BalanceInterval it counts, over the tenants running here
// that more than one instance runs, how many each instance leads; if this
// one leads more than its share (the tenants over the instances, rounded
// up) it steps down from the excess, and the next instance in each
// tenant's election leads it. Leadership goes where a tenant's clients
// first connect (kube-apiservers given the same --etcd-servers all start
// on the first instance, and an instance's restart moves all its tenants
// to the others): without this, it would stay there.
func (f *Fleet) balance() {
	defer f.wg.Done()
	every := f.cfg.Tenants.BalanceInterval
	if every < 0 {
		<-f.ctx.Done()
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		f.balanceOnce()
	}
}

// balanceOnce is one look of balance.
func (f *Fleet) balanceOnce() {
	f.mu.Lock()
	stacks := make([]*tenantStack, 0, len(f.stacks))
	for _, s := range f.stacks {
		stacks = append(stacks, s)
	}
	f.mu.Unlock()
	led := map[string]int{} // instance name -> tenants it leads
	var mine []*tenantStack
	total := 0
	for _, s := range stacks {
		if f.ctx.Err() != nil {
			return
		}
		lead, leaderID := s.be.Leader()
		if leaderID == 0 {
			continue
		}
		members, err := s.be.Members()
		if err != nil || len(members) < 2 {
			continue
		}
		leader := ""
		for _, m := range members {
			if _, ok := led[m.Name]; !ok {
				led[m.Name] = 0
			}
			if m.ID == leaderID {
				leader = m.Name
			}
		}
		if leader == "" {
			continue
		}
		total++
		led[leader]++
		if lead {
			mine = append(mine, s)
		}
	}
	if len(led) < 2 {
		return
	}
	share := (total + len(led) - 1) / len(led)
	excess := min(len(mine)-share, maxYieldsPerLook)
	for _, s := range mine {
		if excess <= 0 {
			return
		}
		if s.be.YieldLeadership() {
			excess--
			f.lg.WithFields(logrus.Fields{"tenant": s.name, "leads": len(mine), "share": share, "instances": len(led)}).
				Info("this instance leads more than its share of the tenants: handed one's leadership to the next instance")
		}
	}
}
