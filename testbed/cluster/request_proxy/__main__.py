"""``python -m testbed.cluster.request_proxy``: run one proxy (:func:`testbed.cluster.request_proxy.proxy.main`)."""

import sys

from testbed.cluster.request_proxy.proxy import main

sys.exit(main())
