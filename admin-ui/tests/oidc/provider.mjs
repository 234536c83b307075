// The OpenID provider of the dashboard's OIDC tests (admin-ui/tests/oidc.rs): the npm registry's
// `oidc-provider` (the certified Node.js implementation) with a small configuration of our own,
// on a loopback port. Its built-in development pages take any login and password; the login
// typed picks the account, whose groups come from ACCOUNTS.
//
// Environment: PORT (0: any free one), CLIENT_ID, CLIENT_SECRET, REDIRECT_URIS and
// POST_LOGOUT_REDIRECT_URIS (comma separated), ACCOUNTS (JSON: login -> list of groups).
// Prints one line, `listening <issuer>`, once it answers.
//
// Test controls (only this test provider has them):
//   GET /test/mode?m=...  how the token endpoint's ID tokens are altered from now on:
//     none (as issued), wrong-iss (re-signed with our key, another issuer), wrong-aud (another
//     audience), expired (exp an hour ago), tampered (groups changed, signature kept),
//     unknown-key (signed by a key the JWKS never had)
//   GET /test/rotate      a new signing key (new kid) replaces the old one in the JWKS

import http from 'node:http';
import * as jose from 'jose';
import Provider from 'oidc-provider';

const env = process.env;
const port = Number(env.PORT || 0);
const accounts = JSON.parse(env.ACCOUNTS || '{}');
const clientId = env.CLIENT_ID || 'screenlimit-dashboard';
const clientSecret = env.CLIENT_SECRET || 'dashboard-test-secret';
const redirectUris = (env.REDIRECT_URIS || '').split(',').filter(Boolean);
const postLogoutRedirectUris = (env.POST_LOGOUT_REDIRECT_URIS || '').split(',').filter(Boolean);

let generation = 0;
async function newKey() {
  generation += 1;
  const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  return { ...jwk, kid: `test-key-${generation}`, alg: 'RS256', use: 'sig' };
}

let mode = 'none';
let signingJwk = await newKey();
const rogueJwk = { ...(await newKey()), kid: 'rogue-key' };

function makeProvider(issuer) {
  const provider = new Provider(issuer, {
    clients: [{
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: redirectUris,
      post_logout_redirect_uris: postLogoutRedirectUris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    jwks: { keys: [signingJwk] },
    pkce: { required: () => true },
    // The scope `groups` releases the claim `groups`, in the ID token itself.
    claims: { openid: ['sub'], profile: ['name', 'preferred_username'], groups: ['groups'] },
    scopes: ['openid', 'profile', 'groups'],
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
    cookies: { keys: ['screenlimit-test-provider-cookie-key'] },
    ttl: { IdToken: 600, AccessToken: 600, AuthorizationCode: 60, Session: 3600, Interaction: 600, Grant: 3600 },
    async findAccount(_ctx, id) {
      return {
        accountId: id,
        async claims() {
          return {
            sub: id,
            name: `${id[0].toUpperCase()}${id.slice(1)} Tester`,
            preferred_username: id,
            groups: accounts[id] || [],
          };
        },
      };
    },
    async loadExistingGrant(ctx) {
      // Consent is taken as given (a company's own dashboard), so the test sees one login page.
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
      grant.addOIDCScope('openid profile groups');
      await grant.save();
      return grant;
    },
  });
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.path === '/token' && ctx.body && ctx.body.id_token && mode !== 'none') {
      ctx.body = { ...ctx.body, id_token: await alter(ctx.body.id_token, issuer) };
    }
  });
  return provider;
}

async function sign(claims, jwk) {
  const key = await jose.importJWK(jwk, 'RS256');
  return new jose.SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: jwk.kid, typ: 'JWT' }).sign(key);
}

async function alter(idToken, issuer) {
  const claims = jose.decodeJwt(idToken);
  const now = Math.floor(Date.now() / 1000);
  switch (mode) {
    case 'wrong-iss': return sign({ ...claims, iss: 'http://127.0.0.1:1/another-issuer' }, signingJwk);
    case 'wrong-aud': return sign({ ...claims, aud: 'another-client' }, signingJwk);
    case 'expired': return sign({ ...claims, iat: now - 7200, exp: now - 3600 }, signingJwk);
    case 'unknown-key': return sign(claims, rogueJwk);
    case 'tampered': {
      const [head, , signature] = idToken.split('.');
      const body = Buffer.from(JSON.stringify({ ...claims, groups: ['sl-support'] })).toString('base64url');
      return `${head}.${body}.${signature}`;
    }
    default: throw new Error(`unknown mode ${mode} for ${issuer}`);
  }
}

let provider;
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1');
  if (url.pathname === '/test/mode') {
    mode = url.searchParams.get('m') || 'none';
    res.end(`mode ${mode}\n`);
    return;
  }
  if (url.pathname === '/test/rotate') {
    newKey().then((jwk) => {
      signingJwk = jwk;
      provider = makeProvider(provider.issuer);
      res.end(`key ${jwk.kid}\n`);
    });
    return;
  }
  provider.callback()(req, res);
});

server.listen(port, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  provider = makeProvider(issuer);
  process.stdout.write(`listening ${issuer}\n`);
});
