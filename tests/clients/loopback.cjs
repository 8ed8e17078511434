// Preloaded into the conformance suite's HTTP bridge (`node --require loopback.cjs`): every
// listening TCP socket binds to 127.0.0.1, whatever host the program asks for or leaves out.
// supergateway listens on every interface and has no option to say otherwise; this keeps the
// bridge, and the stdio server behind it, unreachable from any other machine while the check
// runs. A listen() whose address this cannot see is refused rather than let through.
'use strict';

const net = require('node:net');

const LOOPBACK = '127.0.0.1';
const listen = net.Server.prototype.listen;

function isPort(value) {
  return typeof value === 'number' || (typeof value === 'string' && /^\d+$/.test(value));
}

net.Server.prototype.listen = function listenOnLoopback(...args) {
  const [first] = args;
  if (isPort(first)) {
    // listen(port[, host][, backlog][, callback]): the host, when given, is the second argument.
    if (typeof args[1] === 'string') args[1] = LOOPBACK;
    else args.splice(1, 0, LOOPBACK);
  } else if (first !== null && typeof first === 'object' && 'port' in first) {
    args[0] = { ...first, host: LOOPBACK };
  } else if (!(typeof first === 'string' || (first !== null && typeof first === 'object' && 'path' in first))) {
    // A Unix socket path is not reachable over the network and passes unchanged.
    throw new Error('loopback.cjs: refusing a listen() it cannot confine to 127.0.0.1');
  }
  return listen.apply(this, args);
};
